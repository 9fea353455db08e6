"""Soak: ``aioloader ingest`` of a million generated URLs, killed and resumed, read back whole.

Run: ``python benchmarks/micro/soak_ingest.py --urls 1000000`` (tens of minutes on 2 cores).
docs/benchmarks.md (micro-benchmarks) says what it measures.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from aioloader.sinks import read_failures, read_manifest  # noqa: E402
from tests._support.http_server import scheduled_fault  # noqa: E402

SEED = 7
ERROR_RATE = 0.02
KILL_FRACTIONS = (0.05, 0.10, 0.15)
RSS_GROWTH_TARGET_MIB = 50.0
THROUGHPUT_TARGET = 0.9
_COMMITTED = re.compile(r"^committed (\S+): inputs (\d+)\.\.(\d+) (\d+) ok, (\d+) failed$")


@dataclass(frozen=True)
class Commit:
    """One ``committed ...`` line of a run: when it came, the inputs' end, the RSS then."""

    seconds: float
    end: int
    rss_mib: float


@dataclass
class SoakResult:
    """What one soak measured (see the module doc for each figure)."""

    urls: int
    shard_samples: int
    kills: list[int] = field(default_factory=list)
    seconds: float = 0.0
    last_run_start: int = 0
    rss_early_mib: float = 0.0
    rss_end_mib: float = 0.0
    rate_first: float = 0.0
    rate_last: float = 0.0
    samples: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0
    gaps: int = 0
    unexpected_outcomes: int = 0
    rss_curve: list[tuple[int, float]] = field(default_factory=list)

    @property
    def rss_growth_mib(self) -> float:
        """RSS at the end minus RSS after the first N/10 inputs of the last run."""
        return self.rss_end_mib - self.rss_early_mib

    @property
    def rate_ratio(self) -> float:
        """Throughput of the job's last N/10 inputs over the last run's first N/10."""
        return self.rate_last / self.rate_first if self.rate_first else 0.0


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _start_server() -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "tests._support.http_server", "--error-rate"]
    command += [str(ERROR_RATE), "--seed", str(SEED), "--image-size", "32", "32"]
    server = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    assert server.stdout is not None
    return server, server.stdout.readline().strip()


def _ingest_command(urls: Path, out: Path, shard_samples: int) -> list[str]:
    command = [sys.executable, "-m", "aioloader", "ingest", str(urls), str(out)]
    command += ["--max-in-flight", "512", "--per-host", "512", "--read-timeout", "1"]
    command += ["--allow-address", "127.0.0.1"]  # the server is on loopback, refused by default
    return [*command, "--retries", "0", "--shard-samples", str(shard_samples)]


def _run(command: list[str], kill_at: int | None, log: IO[str]) -> list[Commit]:
    """One run of the command; SIGKILL once a commit reaches ``kill_at`` (None: to the end)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert process.stdout is not None
    commits: list[Commit] = []
    for line in process.stdout:
        match = _COMMITTED.match(line.strip())
        if match is None:
            continue
        end = int(match.group(3)) + 1
        commits.append(Commit(time.perf_counter() - started, end, _rss_mib(process.pid)))
        if kill_at is not None and end >= kill_at:
            process.send_signal(signal.SIGKILL)
            break
    _, errors = process.communicate(timeout=600)
    if kill_at is None and process.returncode != 0:
        raise RuntimeError(f"the last run failed ({process.returncode}): {errors[-2000:]}")
    last = commits[-1].end if commits else None
    print(f"run ended at input {last} (status {process.returncode})", file=log, flush=True)
    return commits


def _rate(commits: list[Commit], low: int, high: int) -> float:
    """Inputs per second between the first commit at or past ``low`` and the first past ``high``."""
    first = next(c for c in commits if c.end >= low)
    last = next((c for c in commits if c.end >= high), commits[-1])
    return (last.end - first.end) / (last.seconds - first.seconds)


def _read_back(out: Path, urls: int, result: SoakResult) -> None:
    """Every key of every shard, every failure record: exactly once each, 0..urls-1."""
    seen: Counter[int] = Counter()
    manifest = read_manifest(out)
    for record in manifest.shards:
        with tarfile.open(out / record.name) as shard:
            keys = {member.name.split(".", 1)[0] for member in shard}
        seen.update(int(key) for key in keys)
    result.samples = sum(seen.values())
    reasons: Counter[str] = Counter()
    failed: set[int] = set()
    for failure in read_failures(out):
        assert failure.position is not None
        seen[failure.position] += 1
        reasons[failure.reason] += 1
        failed.add(failure.position)
    result.failures = dict(reasons.most_common())
    result.duplicates = sum(count - 1 for count in seen.values() if count > 1)
    result.gaps = sum(1 for position in range(urls) if position not in seen)
    expected = {n for n in range(urls) if scheduled_fault(SEED, f"/img/{n}.jpg", ERROR_RATE)}
    result.unexpected_outcomes = len(expected ^ failed)


def soak(urls: int, workdir: Path, log: IO[str] = sys.stdout) -> SoakResult:
    """Run the soak with ``urls`` inputs in ``workdir`` (it writes ``urls.txt`` and ``out/``)."""
    shard_samples = max(100, urls // 200)
    result = SoakResult(urls=urls, shard_samples=shard_samples)
    server, base = _start_server()
    try:
        listed = workdir / "urls.txt"
        with open(listed, "w") as handle:
            handle.writelines(f"{base}/img/{n}.jpg\n" for n in range(urls))
        out = workdir / "out"
        command = _ingest_command(listed, out, shard_samples)
        started = time.perf_counter()
        for fraction in KILL_FRACTIONS:
            commits = _run(command, int(urls * fraction), log)
            result.kills.append(commits[-1].end if commits else 0)
        result.last_run_start = read_manifest(out).end
        commits = _run(command, None, log)
        result.seconds = time.perf_counter() - started
    finally:
        assert server.stdin is not None
        assert server.stdout is not None
        server.stdin.close()
        server.wait(timeout=60)
        server.stdout.close()
    window = urls // 10
    early = next(c for c in commits if c.end >= result.last_run_start + window)
    result.rss_early_mib, result.rss_end_mib = early.rss_mib, commits[-1].rss_mib
    for tenth in range(1, 11):  # the last run's RSS at every tenth of the job
        at = next((c for c in commits if c.end >= urls * tenth // 10), None)
        if at is not None and at.end >= result.last_run_start:
            result.rss_curve.append((at.end, round(at.rss_mib, 1)))
    result.rate_first = _rate(commits, 0, result.last_run_start + window)
    result.rate_last = _rate(commits, urls - window, urls)
    _read_back(out, urls, result)
    return result


def report(result: SoakResult, command: str) -> str:
    """The Markdown table of one soak, with its targets."""
    n = result.urls
    growth_ok = result.rss_growth_mib <= RSS_GROWTH_TARGET_MIB
    ratio_ok = result.rate_ratio >= THROUGHPUT_TARGET
    once_ok = result.duplicates == 0 and result.gaps == 0
    rows = [
        f"| RSS after the last run's first {n // 10:,} inputs | {result.rss_early_mib:.1f} MiB | |",
        f"| RSS at the end ({n:,} inputs) | {result.rss_end_mib:.1f} MiB | |",
        f"| RSS growth | {result.rss_growth_mib:+.1f} MiB | <= {RSS_GROWTH_TARGET_MIB:.0f} MiB: "
        f"{'met' if growth_ok else 'not met'} |",
        f"| throughput, last run's first {n // 10:,} | {result.rate_first:,.0f} inputs/s | |",
        f"| throughput, job's last {n // 10:,} | {result.rate_last:,.0f} inputs/s | |",
        f"| ratio last / first | {result.rate_ratio:.2f} | >= {THROUGHPUT_TARGET}: "
        f"{'met' if ratio_ok else 'not met'} |",
        f"| killed (SIGKILL) at committed input | {', '.join(f'{k:,}' for k in result.kills)} | "
        "3 kills |",
        f"| samples + failure records read back | {result.samples:,} + "
        f"{sum(result.failures.values()):,} | {n:,} |",
        f"| duplicates / gaps | {result.duplicates} / {result.gaps} | 0 / 0: "
        f"{'met' if once_ok else 'not met'} |",
        f"| failures by reason | {', '.join(f'{k} {v:,}' for k, v in result.failures.items())} | "
        f"{ERROR_RATE:.0%} scheduled |",
        f"| outcomes that differ from the fate table | {result.unexpected_outcomes:,} | |",
        f"| wall time, 4 runs | {result.seconds:,.0f} s | |",
        "| last run's RSS at each tenth (input: MiB) | "
        + ", ".join(f"{end:,}: {rss:.1f}" for end, rss in result.rss_curve)
        + " | |",
    ]
    head = [
        f"## Soak: {n:,} URLs, 3 kills and resumes ({time.strftime('%Y-%m-%d')})",
        "",
        f"Command: `{command}`; shards of {result.shard_samples:,} inputs; the last run "
        f"started at input {result.last_run_start:,}.",
        "",
        "| figure | value | target |",
        "|---|---|---|",
    ]
    return "\n".join(head + rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the soak and print (and optionally save) its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--workdir", help="where urls.txt and out/ go (default: a temp dir)")
    parser.add_argument("--results", help="append the Markdown table to this file")
    parser.add_argument("--json", help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="aioloader-soak-") as scratch:
        workdir = Path(args.workdir or scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        result = soak(args.urls, workdir, sys.stderr)
    command = "python benchmarks/micro/soak_ingest.py " + " ".join(argv or sys.argv[1:])
    table = report(result, command.strip())
    print(table)
    if args.results:
        with open(args.results, "a") as handle:
            handle.write("\n" + table)
    if args.json:
        figures = {**asdict(result), "rss_growth_mib": result.rss_growth_mib}
        Path(args.json).write_text(json.dumps({**figures, "rate_ratio": result.rate_ratio}))
    return 0 if result.duplicates == 0 and result.gaps == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
