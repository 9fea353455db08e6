"""Trickle: one URL that sends 1 byte every 0.5 s among 1,200 good ones, every default.

Issue 22's first case as a user runs it: ``python -m aioloader ingest urls.txt out/
--allow-address 127.0.0.1 --quiet``, so the fetcher keeps its real deadlines. The clean list
and the list with the trickler at ``--position`` alternate ``--rounds`` times, each run
checked before its time is kept. docs/benchmarks.md (micro-benchmarks) says the rest.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _ingest_common as common

from aioloader.sinks import read_failures, read_manifest
from aioloader.sources import HttpFetcher

TRICKLE_PATH = "/trickle/500/slow"  # headers for 4,096 bytes, then one byte every 500 ms
DEFAULTS = HttpFetcher()  # the documented deadlines, read from the class, not restated


@dataclass
class TrickleResult:
    urls: int
    position: int
    latency: float
    clean_seconds: list[float] = field(default_factory=list)
    trickle_seconds: list[float] = field(default_factory=list)
    watched_seconds: list[float] = field(default_factory=list)
    detail: str = ""
    clean: float = 0.0  # the medians of the runs without and with the trickler
    trickle: float = 0.0


def _check(out: Path, urls: int, trickler: int | None) -> float | None:
    """The output is whole; the seconds the trickler was watched (from its detail)."""
    manifest, failures = read_manifest(out), list(read_failures(out))
    samples = sum(record.samples for record in manifest.shards)
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


def _run(listed: Path, out: Path) -> float:
    """One ``aioloader ingest`` with every default (loopback allowed); its wall seconds."""
    command = [sys.executable, "-m", "aioloader", "ingest", str(listed), str(out)]
    started = time.perf_counter()
    done = subprocess.run([*command, "--allow-address", "127.0.0.1", "--quiet"],
                          cwd=common.ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"ingest failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.perf_counter() - started


def measure(urls: int, position: int, latency: float, rounds: int, workdir: Path) -> TrickleResult:
    """Alternate clean and trickle runs ``rounds`` times each; check and time every one."""
    result = TrickleResult(urls=urls, position=position, latency=latency)
    with common.http_server("--latency", str(latency)) as base:
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
    result.clean = statistics.median(result.clean_seconds)
    result.trickle = statistics.median(result.trickle_seconds)
    return result


def report(result: TrickleResult, command: str, load: tuple[float, ...]) -> str:
    """The Markdown table, with the target."""
    grace, deadline = DEFAULTS.min_rate_grace, DEFAULTS.total_timeout
    assert deadline is not None
    met = grace <= max(result.watched_seconds) < deadline
    clean, trickle = result.clean, result.trickle

    def each(seconds: list[float]) -> str:
        return ", ".join(f"{s:.1f}" for s in seconds)

    rows = [
        (f"wall time, {result.urls:,} good URLs (median; each run)",
         f"{clean:.1f} s ({each(result.clean_seconds)})", ""),
        (f"wall time, the trickler at position {result.position} (median; each run)",
         f"{trickle:.1f} s ({each(result.trickle_seconds)})",
         f"the job finishes: {common.met(bool(result.trickle_seconds))}"),
        ("what the trickler cost the job", f"{trickle - clean:+.1f} s", ""),
        ("trickler watched before it failed (each run)", f"{each(result.watched_seconds)} s",
         f"`timeout` within the documented deadline ({grace:g} s grace, <= {deadline:g} s "
         f"total): {common.met(met)}"),
        ("the trickler's failure record", f"timeout: {result.detail}", ""),
    ]  # fmt: skip
    context = (
        f"Command: `{command}`; server latency {result.latency:g} s; load average "
        f"{', '.join(f'{x:.2f}' for x in load)} (1, 5, 15 min) at the start."
    )
    return common.report("Trickle with every default", context, rows)


def main(argv: list[str] | None = None) -> int:
    """Run both inputs, print (and optionally save) the table."""
    options = common.parser(__doc__, 1200)
    options.add_argument("--position", type=int, default=2, help="the trickler's position")
    options.add_argument("--latency", type=float, default=0.05, help="server latency, seconds")
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument("--json", help="write the figures as JSON to this file")
    args = options.parse_args(argv)
    if not 0 <= args.position < args.urls:
        options.error(f"--position must be in [0, --urls) but got {args.position}")
    if args.rounds < 1:
        options.error(f"--rounds must be >= 1 but got {args.rounds}")
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="aioloader-trickle-") as scratch:
        result = measure(args.urls, args.position, args.latency, args.rounds, Path(scratch))
    table = report(result, common.command_line("trickle_ingest.py", argv), load)
    figures = {**asdict(result), "load_average": load}
    common.publish(table, args, figures, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
