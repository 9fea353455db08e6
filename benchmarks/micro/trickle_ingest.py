"""Trickle: one URL that sends 1 byte every 0.5 s among 1,200 good ones, every default.

Issue 22's first case, as a user would run it: ``python -m aioloader ingest urls.txt out/
--allow-address 127.0.0.1 --quiet``, nothing else set, so the fetcher has its real
defaults (``total_timeout=60``, ``min_rate=1024`` B/s over ``min_rate_grace=10`` s, 30 s
read timeout, 2 retries, 256 in flight, a window of 1,024 inputs and 512 MiB). The server is
the loopback test server (``tests/_support/http_server.py``, run as its own process) with
every answer ``--latency`` seconds late; its ``/trickle/500/slow`` path sends headers
announcing 4,096 bytes, then one byte every 500 ms by its own timer.

Two inputs, run alternately ``--rounds`` times each (a fresh process and output folder per
run): *clean*, ``N`` image URLs; *trickle*, the same list with the URL at ``--position``
(default 2, early, so the whole window waits behind it) replaced by the trickler. Before a
run's time is kept its output is checked: every good URL is a sample, the trickler is a
``timeout`` failure record at its position naming the rate it measured, the manifest ends
at ``N``.

Figures (``benchmarks/results/trickle.md``): the median wall time of each input (the whole
command, start-up included), the difference (what the trickler cost the job), and how long
the trickler was watched before it failed (from its failure detail). The target (issue 22):
the job finishes and the trickler is recorded as ``timeout`` within the documented
deadline, one ``min_rate_grace`` window and at most ``total_timeout``.

Run: ``python benchmarks/micro/trickle_ingest.py`` (about a minute on 2 cores);
``--results FILE`` appends the table, ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from aioloader.sinks import read_failures, read_manifest  # noqa: E402
from aioloader.sources import HttpFetcher  # noqa: E402

TRICKLE_PATH = "/trickle/500/slow"
DEFAULTS = HttpFetcher()  # the documented deadlines, read from the class, not restated


@dataclass
class TrickleResult:
    """What the runs measured (see the module doc)."""

    urls: int
    position: int
    latency: float
    clean_seconds: list[float] = field(default_factory=list)
    trickle_seconds: list[float] = field(default_factory=list)
    watched_seconds: list[float] = field(default_factory=list)
    detail: str = ""

    @property
    def clean(self) -> float:
        """Median wall seconds without the trickler."""
        return statistics.median(self.clean_seconds)

    @property
    def trickle(self) -> float:
        """Median wall seconds with it."""
        return statistics.median(self.trickle_seconds)


def _start_server(latency: float) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "tests._support.http_server", "--latency", str(latency)]
    server = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    assert server.stdout is not None
    return server, server.stdout.readline().strip()


def _run(listed: Path, out: Path) -> float:
    """One ``aioloader ingest`` with every default (loopback allowed); its wall seconds."""
    command = [sys.executable, "-m", "aioloader", "ingest", str(listed), str(out)]
    command += ["--allow-address", "127.0.0.1", "--quiet"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"ingest failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds


def _check(out: Path, urls: int, trickler: int | None) -> float | None:
    """The output is whole; the seconds the trickler was watched (from its detail)."""
    manifest = read_manifest(out)
    samples = sum(record.samples for record in manifest.shards)
    failures = list(read_failures(out))
    if manifest.end != urls:
        raise AssertionError(f"the manifest ends at {manifest.end}, not {urls}")
    if trickler is None:
        if samples != urls or failures:
            raise AssertionError(f"clean run: {samples} samples, failures {failures[:3]}")
        return None
    [failure] = failures if len(failures) == 1 else [None]
    if failure is None or (failure.position, failure.reason) != (trickler, "timeout"):
        raise AssertionError(f"expected one timeout at {trickler}, got {failures[:3]}")
    if samples != urls - 1 or f"below min_rate={DEFAULTS.min_rate:g} B/s" not in failure.detail:
        raise AssertionError(f"{samples} samples; trickler's detail {failure.detail!r}")
    return float(failure.detail.split(" over ", 1)[1].split(" s", 1)[0])


def measure(urls: int, position: int, latency: float, rounds: int, workdir: Path) -> TrickleResult:
    """Alternate clean and trickle runs ``rounds`` times each; check and time every one."""
    result = TrickleResult(urls=urls, position=position, latency=latency)
    server, base = _start_server(latency)
    try:
        good = [f"{base}/img/{n}.jpg" for n in range(urls)]
        with_trickler = list(good)
        with_trickler[position] = base + TRICKLE_PATH
        lists = {"clean": workdir / "clean.txt", "trickle": workdir / "trickle.txt"}
        lists["clean"].write_text("\n".join(good) + "\n", encoding="utf-8")
        lists["trickle"].write_text("\n".join(with_trickler) + "\n", encoding="utf-8")
        for round_ in range(rounds):
            for name, listed in lists.items():
                out = workdir / f"{name}-{round_}"
                seconds = _run(listed, out)
                watched = _check(out, urls, position if name == "trickle" else None)
                if watched is None:
                    result.clean_seconds.append(seconds)
                else:
                    result.trickle_seconds.append(seconds)
                    result.watched_seconds.append(watched)
                    result.detail = next(iter(read_failures(out))).detail
                print(f"{name} round {round_}: {seconds:.1f} s", file=sys.stderr, flush=True)
    finally:
        assert server.stdin is not None
        assert server.stdout is not None
        server.stdin.close()
        server.wait(timeout=60)
        server.stdout.close()
    return result


def report(result: TrickleResult, command: str, load: tuple[float, ...]) -> str:
    """The Markdown table, with the target."""
    grace, deadline = DEFAULTS.min_rate_grace, DEFAULTS.total_timeout
    assert deadline is not None
    watched = max(result.watched_seconds)
    met = grace <= watched < deadline
    spread = ", ".join(f"{s:.1f}" for s in result.clean_seconds)
    spread_t = ", ".join(f"{s:.1f}" for s in result.trickle_seconds)
    rows = [
        f"| wall time, {result.urls:,} good URLs (median; each run) | {result.clean:.1f} s "
        f"({spread}) | |",
        f"| wall time, the trickler at position {result.position} (median; each run) | "
        f"{result.trickle:.1f} s ({spread_t}) | the job finishes: "
        f"{'met' if result.trickle_seconds else 'not met'} |",
        f"| what the trickler cost the job | {result.trickle - result.clean:+.1f} s | |",
        f"| trickler watched before it failed (each run) | "
        f"{', '.join(f'{s:.1f}' for s in result.watched_seconds)} s | `timeout` within the "
        f"documented deadline ({grace:g} s grace, <= {deadline:g} s total): "
        f"{'met' if met else 'not met'} |",
        f"| the trickler's failure record | timeout: {result.detail} | |",
    ]
    head = [
        f"## Trickle with every default ({time.strftime('%Y-%m-%d')})",
        "",
        f"Command: `{command}`; server latency {result.latency:g} s; load average "
        f"{', '.join(f'{x:.2f}' for x in load)} (1, 5, 15 min) at the start.",
        "",
        "| figure | value | target |",
        "|---|---|---|",
    ]
    return "\n".join(head + rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run both inputs, print (and optionally save) the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=1200)
    parser.add_argument("--position", type=int, default=2, help="the trickler's position")
    parser.add_argument("--latency", type=float, default=0.05, help="server latency, seconds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results", help="append the Markdown table to this file")
    parser.add_argument("--json", help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    if not 0 <= args.position < args.urls:
        parser.error(f"--position must be in [0, --urls) but got {args.position}")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1 but got {args.rounds}")
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="aioloader-trickle-") as scratch:
        result = measure(args.urls, args.position, args.latency, args.rounds, Path(scratch))
    command = "python benchmarks/micro/trickle_ingest.py " + " ".join(argv or sys.argv[1:])
    table = report(result, command.strip(), load)
    print(table)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as handle:
            handle.write("\n" + table)
    if args.json:
        figures = {**asdict(result), "clean": result.clean, "trickle": result.trickle}
        Path(args.json).write_text(json.dumps({**figures, "load_average": load}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
