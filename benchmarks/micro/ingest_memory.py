"""Where the soak's RSS goes: ``ingest()`` under ``tracemalloc``, two snapshots diffed.

The soak's job (its server, fetcher settings and window) run in this process; at the first
commit past N/10 inputs and at the last: the RSS, the traced bytes, the RSS after glibc's
``malloc_trim(0)``; then the allocation sites that grew most between the two. Tracing slows
the job about twofold. Run: ``python benchmarks/micro/ingest_memory.py --urls 50000``.
"""

from __future__ import annotations

import ctypes
import gc
import operator
import re
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _ingest_common as common
import anyio

from aioloader.ingest import IngestSummary, ingest
from aioloader.sinks import ShardRecord
from aioloader.sources import HttpFetcher, RetryPolicy


class Point(NamedTuple):
    """One measuring point, taken right after ``gc.collect()``."""

    end: int
    seconds: float
    rss_mib: float
    traced_mib: float
    snapshot: tracemalloc.Snapshot
    trimmed_mib: float | None  # RSS after glibc's malloc_trim(0); None off glibc


def _point(end: int, started: float) -> Point:
    gc.collect()
    snapshot = tracemalloc.take_snapshot()
    snapshot = snapshot.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    traced, rss = tracemalloc.get_traced_memory()[0] / 2**20, common.rss_mib()
    try:  # what the trim hands back was freed by the program and kept by the C allocator
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        trimmed: float | None = common.rss_mib()
    except OSError:
        trimmed = None
    return Point(end, time.perf_counter() - started, rss, traced, snapshot, trimmed)


def measure(urls: int, workdir: Path) -> tuple[list[Point], IngestSummary]:
    """Ingest ``urls`` URLs as the soak does (server, fetcher, window), tracing; the points."""
    points: list[Point] = []
    shard_samples = max(100, urls // 200)

    def on_commit(record: ShardRecord) -> None:
        end = record.end or 0
        if (not points and end >= urls // 10) or end >= urls:
            points.append(_point(end, started))
            print(f"point at {end:,}: RSS {points[-1].rss_mib:.1f} MiB", file=sys.stderr)

    fetcher = HttpFetcher(max_in_flight=512, max_per_host=512, read_timeout=1.0,
                          retry=RetryPolicy(max_attempts=1), allow=["127.0.0.1"])  # fmt: skip

    async def run(listed: Path) -> IngestSummary:
        async with fetcher:
            return await ingest(listed, workdir / "out", fetcher=fetcher, max_in_flight=512,
                                shard_samples=shard_samples, on_commit=on_commit)  # fmt: skip

    with common.http_server(*common.SOAK_SERVER) as base:
        listed = workdir / "urls.txt"
        listed.write_text("".join(f"{base}/img/{n}.jpg\n" for n in range(urls)), encoding="utf-8")
        started = time.perf_counter()
        return points, anyio.run(run, listed)


def _short(filename: str) -> str:
    """A file name from its package on (``aioloader/...``, ``aiohttp/...``, ``stdlib/...``)."""
    filename = filename.split("/site-packages/", 1)[-1]
    match = re.search(r"/lib/python3\.\d+/(.*)", filename)
    if match is not None:
        return "stdlib/" + match.group(1)
    parts = filename.split("/")
    for anchor in ("aioloader", "benchmarks", "tests"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) :])
    return filename


def report(points: list[Point], summary: IngestSummary, command: str, top: int) -> str:
    """The two points, and the allocation sites that grew most between them."""
    first, last = points[0], points[-1]
    growth = operator.attrgetter("size_diff")

    def mib(value: float | None, sign: str = "") -> str:
        return "n/a" if value is None else f"{value:{sign}.1f}"

    trimmed = None
    if first.trimmed_mib is not None and last.trimmed_mib is not None:
        trimmed = last.trimmed_mib - first.trimmed_mib
    rows: list[tuple[str, ...]] = [
        (name, f"{p.end:,}", f"{p.rss_mib:.1f}", mib(p.trimmed_mib), f"{p.traced_mib:.1f}",
         f"{p.seconds:.0f}")
        for name, p in (("first N/10", first), ("end", last))
    ]  # fmt: skip
    rows.append(("growth", f"{last.end - first.end:,}", f"{last.rss_mib - first.rss_mib:+.1f}",
                 mib(trimmed, "+"), f"{last.traced_mib - first.traced_mib:+.1f}", ""))  # fmt: skip
    columns = ["| point | inputs | RSS MiB | RSS after malloc_trim MiB | traced MiB | seconds |",
               "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    context = f"Command: `{command}`; {summary.ok:,} samples, {summary.failed:,} failures."
    text = common.report("ingest() memory under tracemalloc", context, rows, columns)
    lines = ["", f"Allocation sites whose live bytes grew most (top {top}):", ""]
    lines += ["| site | growth KiB | live KiB at the end | blocks growth |", "|---|---:|---:|---:|"]
    grown = sorted(last.snapshot.compare_to(first.snapshot, "lineno"), key=growth, reverse=True)
    for stat in grown[:top]:
        site = f"{_short(stat.traceback[0].filename)}:{stat.traceback[0].lineno}"
        lines.append(f"| `{site}` | {stat.size_diff / 1024:+,.0f} | {stat.size / 1024:,.0f} | "
                     f"{stat.count_diff:+,} |")  # fmt: skip
    biggest = sorted(
        last.snapshot.compare_to(first.snapshot, "traceback"), key=growth, reverse=True
    )
    if biggest:
        lines += ["", "Traceback of the largest growth (oldest call first):", "", "```text"]
        lines += [f"{_short(f.filename)}:{f.lineno}" for f in biggest[0].traceback] + ["```"]
    return text + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Trace one ingestion, print (and optionally append) the report."""
    options = common.parser(__doc__, 50_000)
    options.add_argument("--frames", type=int, default=12, help="frames traced per allocation")
    options.add_argument("--top", type=int, default=15, help="allocation sites listed")
    args = options.parse_args(argv)
    if args.urls < 1000:
        options.error(f"--urls must be >= 1000 but got {args.urls}")
    tracemalloc.start(args.frames)
    with tempfile.TemporaryDirectory(prefix="aioloader-memory-") as scratch:
        points, summary = measure(args.urls, Path(scratch))
    tracemalloc.stop()
    text = report(points, summary, common.command_line("ingest_memory.py", argv), args.top)
    common.publish(text, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
