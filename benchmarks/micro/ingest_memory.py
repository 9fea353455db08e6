"""Where the soak's RSS goes: ``ingest()`` under ``tracemalloc``, two snapshots diffed.

The soak (``soak_ingest.py``) sees the ingest process's RSS grow by about 10 MiB per
100,000 inputs. This runs the same job in this process, with the soak's server (32 x 32
JPEGs, 2 % scheduled faults, seed 7, its own process) and the soak command's fetcher
settings (512 in flight, 512 per host, 1 s read timeout, no retries, loopback allowed; the
other deadlines at their defaults), on asyncio, with ``tracemalloc`` tracing
``--frames`` frames per allocation.

Two points, both taken in ``on_commit`` right after ``gc.collect()``: the first commit at
or past N/10 inputs, and the last commit. At each: the RSS (``VmRSS``) and the bytes
Python's allocators hold traced (``tracemalloc.get_traced_memory``). The report lists the
allocation sites (file:line) whose live bytes grew most between the two, and the full
traceback of the largest. RSS growth that the traced growth does not explain is memory
Python does not trace: C libraries' own allocations (OpenSSL, the event loop, zlib) and
allocator fragmentation (freed blocks the C allocator keeps).

Right after each RSS reading, glibc's ``malloc_trim(0)`` hands the C heap's free pages
back and the RSS is read again: what that removes was freed by the program and kept by
the allocator. (The trim at the first point lowers the RSS the second point starts from;
the growth columns compare like with like.)

Tracing slows the job about twofold; the figures are for finding the cause, not for
throughput. Run: ``python benchmarks/micro/ingest_memory.py --urls 50000``.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402

from aioloader.ingest import IngestSummary, ingest  # noqa: E402
from aioloader.sinks import ShardRecord  # noqa: E402
from aioloader.sources import HttpFetcher, RetryPolicy  # noqa: E402

SEED = 7
ERROR_RATE = 0.02


@dataclass(frozen=True)
class Point:
    """One measuring point: inputs committed, RSS, traced bytes, the snapshot."""

    end: int
    seconds: float
    rss_mib: float
    traced_mib: float
    snapshot: tracemalloc.Snapshot
    trimmed_mib: float | None  # RSS after glibc's malloc_trim(0); None off glibc


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _point(end: int, started: float) -> Point:
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]
    )
    traced = tracemalloc.get_traced_memory()[0] / 2**20
    rss = _rss_mib()
    return Point(end, time.perf_counter() - started, rss, traced, snapshot, _trimmed_rss())


def _trimmed_rss() -> float | None:
    """RSS after ``malloc_trim(0)`` hands glibc's free heap pages back (None off glibc).

    What the trim removes is memory freed by the program but kept by the C allocator.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    libc.malloc_trim(0)
    return _rss_mib()


def _start_server() -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "tests._support.http_server", "--error-rate"]
    command += [str(ERROR_RATE), "--seed", str(SEED), "--image-size", "32", "32"]
    server = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    assert server.stdout is not None
    return server, server.stdout.readline().strip()


def measure(urls: int, workdir: Path) -> tuple[list[Point], IngestSummary]:
    """Ingest ``urls`` URLs, tracing; the points at N/10 and at the end."""
    points: list[Point] = []
    server, base = _start_server()
    listed = workdir / "urls.txt"
    listed.write_text("".join(f"{base}/img/{n}.jpg\n" for n in range(urls)), encoding="utf-8")
    started = time.perf_counter()

    def on_commit(record: ShardRecord) -> None:
        end = record.end or 0
        if (not points and end >= urls // 10) or end >= urls:
            points.append(_point(end, started))
            print(f"point at {end:,}: RSS {points[-1].rss_mib:.1f} MiB", file=sys.stderr)

    async def run() -> IngestSummary:
        async with HttpFetcher(
            max_in_flight=512,
            max_per_host=512,
            read_timeout=1.0,
            retry=RetryPolicy(max_attempts=1),
            allow=["127.0.0.1"],
        ) as fetcher:
            return await ingest(
                listed,
                workdir / "out",
                fetcher=fetcher,
                max_in_flight=512,
                shard_samples=max(100, urls // 200),
                on_commit=on_commit,
            )

    try:
        summary = anyio.run(run)
    finally:
        assert server.stdin is not None
        assert server.stdout is not None
        server.stdin.close()
        server.wait(timeout=60)
        server.stdout.close()
    return points, summary


def report(points: list[Point], summary: IngestSummary, command: str, top: int) -> str:
    """The two points, and the allocation sites that grew most between them."""
    first, last = points[0], points[-1]
    stats = last.snapshot.compare_to(first.snapshot, "lineno")
    grown = sorted(stats, key=lambda s: s.size_diff, reverse=True)[:top]
    lines = [
        f"## ingest() memory under tracemalloc ({time.strftime('%Y-%m-%d')})",
        "",
        f"Command: `{command}`; {summary.ok:,} samples, {summary.failed:,} failures.",
        "",
        "| point | inputs | RSS MiB | RSS after malloc_trim MiB | traced MiB | seconds |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, p in (("first N/10", first), ("end", last)):
        lines.append(
            f"| {name} | {p.end:,} | {p.rss_mib:.1f} | {_mib(p.trimmed_mib)} | "
            f"{p.traced_mib:.1f} | {p.seconds:.0f} |"
        )
    trimmed = (
        None
        if first.trimmed_mib is None or last.trimmed_mib is None
        else last.trimmed_mib - first.trimmed_mib
    )
    lines += [
        f"| growth | {last.end - first.end:,} | {last.rss_mib - first.rss_mib:+.1f} | "
        f"{_mib(trimmed, sign=True)} | {last.traced_mib - first.traced_mib:+.1f} | |",
        "",
        f"Allocation sites whose live bytes grew most (top {top}):",
        "",
        "| site | growth KiB | live KiB at the end | blocks growth |",
        "|---|---:|---:|---:|",
    ]
    for stat in grown:
        frame = stat.traceback[0]
        site = f"{_short(frame.filename)}:{frame.lineno}"
        lines.append(
            f"| `{site}` | {stat.size_diff / 1024:+,.0f} | {stat.size / 1024:,.0f} | "
            f"{stat.count_diff:+,} |"
        )
    biggest = sorted(
        last.snapshot.compare_to(first.snapshot, "traceback"),
        key=lambda s: s.size_diff,
        reverse=True,
    )[:1]
    if biggest:
        lines += ["", "Traceback of the largest growth (oldest call first):", "", "```text"]
        lines += [f"{_short(f.filename)}:{f.lineno}" for f in biggest[0].traceback]
        lines += ["```"]
    return "\n".join(lines) + "\n"


def _mib(value: float | None, sign: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.1f}" if sign else f"{value:.1f}"


def _short(filename: str) -> str:
    """A file name from its package on (``aioloader/...``, ``aiohttp/...``, ``stdlib/...``)."""
    if "/site-packages/" in filename:
        filename = filename.split("/site-packages/", 1)[1]
    match = re.search(r"/lib/python3\.\d+/(.*)", filename)
    if match is not None:
        return "stdlib/" + match.group(1)
    parts = filename.split("/")
    for anchor in ("aioloader", "benchmarks", "tests"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) :])
    return filename


def main(argv: list[str] | None = None) -> int:
    """Trace one ingestion, print (and optionally append) the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=50_000)
    parser.add_argument("--frames", type=int, default=12, help="frames traced per allocation")
    parser.add_argument("--top", type=int, default=15, help="allocation sites listed")
    parser.add_argument("--results", help="append the Markdown report to this file")
    args = parser.parse_args(argv)
    if args.urls < 1000:
        parser.error(f"--urls must be >= 1000 but got {args.urls}")
    tracemalloc.start(args.frames)
    with tempfile.TemporaryDirectory(prefix="aioloader-memory-") as scratch:
        points, summary = measure(args.urls, Path(scratch))
    tracemalloc.stop()
    command = "python benchmarks/micro/ingest_memory.py " + " ".join(argv or sys.argv[1:])
    text = report(points, summary, command.strip(), args.top)
    print(text)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as handle:
            handle.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
