"""Soak: ``aioloader ingest`` of a million generated URLs, killed and resumed, read back whole.

Run: ``python benchmarks/micro/soak_ingest.py --urls 1000000`` (tens of minutes on 2 cores).
docs/benchmarks.md (micro-benchmarks) says what it measures.
"""

from __future__ import annotations

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
from typing import IO, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _ingest_common as common

from aioloader.sinks import read_failures, read_manifest
from tests._support.http_server import scheduled_fault

KILL_FRACTIONS = (0.05, 0.10, 0.15)
RSS_GROWTH_TARGET_MIB = 50.0
THROUGHPUT_TARGET = 0.9
_COMMITTED = re.compile(r"^committed \S+: inputs \d+\.\.(\d+) \d+ ok, \d+ failed$")


class Commit(NamedTuple):
    """One ``committed ...`` line of a run: when it came, the inputs' end, the RSS then."""

    seconds: float
    end: int
    rss_mib: float


@dataclass
class SoakResult:
    """What one soak measured (docs/benchmarks.md says what each figure is)."""

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
    rss_growth_mib: float = 0.0  # the end minus after the last run's first N/10 inputs
    rate_ratio: float = 0.0  # the job's last N/10 inputs over the last run's first N/10


def _run(command: list[str], kill_at: int | None, log: IO[str]) -> list[Commit]:
    """One run of the command; SIGKILL once a commit reaches ``kill_at`` (None: to the end)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=common.ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert process.stdout is not None
    commits: list[Commit] = []
    for line in process.stdout:
        if match := _COMMITTED.match(line.strip()):
            end = int(match.group(1)) + 1
            commits.append(Commit(time.perf_counter() - started, end, common.rss_mib(process.pid)))
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
    for record in read_manifest(out).shards:
        with tarfile.open(out / record.name) as shard:
            seen.update({int(member.name.split(".", 1)[0]) for member in shard})
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
    expected = {
        n for n in range(urls) if scheduled_fault(common.SEED, f"/img/{n}.jpg", common.ERROR_RATE)
    }
    result.unexpected_outcomes = len(expected ^ failed)


def soak(urls: int, workdir: Path, log: IO[str] = sys.stdout) -> SoakResult:
    """Run the soak with ``urls`` inputs in ``workdir`` (it writes ``urls.txt`` and ``out/``)."""
    shard_samples = max(100, urls // 200)
    result = SoakResult(urls=urls, shard_samples=shard_samples)
    listed, out = workdir / "urls.txt", workdir / "out"
    command = [sys.executable, "-m", "aioloader", "ingest", str(listed), str(out)]
    command += ["--max-in-flight", "512", "--per-host", "512", "--read-timeout", "1"]
    command += ["--allow-address", "127.0.0.1"]  # the server is on loopback, refused by default
    command += ["--retries", "0", "--shard-samples", str(shard_samples)]
    with common.http_server(*common.SOAK_SERVER) as base:
        listed.write_text("".join(f"{base}/img/{n}.jpg\n" for n in range(urls)))
        started = time.perf_counter()
        for fraction in KILL_FRACTIONS:
            commits = _run(command, int(urls * fraction), log)
            result.kills.append(commits[-1].end if commits else 0)
        result.last_run_start = read_manifest(out).end
        commits = _run(command, None, log)
        result.seconds = time.perf_counter() - started
    window = urls // 10
    early = next(c for c in commits if c.end >= result.last_run_start + window)
    result.rss_early_mib, result.rss_end_mib = early.rss_mib, commits[-1].rss_mib
    for tenth in range(1, 11):  # the last run's RSS at every tenth of the job
        at = next((c for c in commits if c.end >= urls * tenth // 10), None)
        if at is not None and at.end >= result.last_run_start:
            result.rss_curve.append((at.end, round(at.rss_mib, 1)))
    result.rate_first = _rate(commits, 0, result.last_run_start + window)
    result.rate_last = _rate(commits, urls - window, urls)
    result.rss_growth_mib = result.rss_end_mib - result.rss_early_mib
    result.rate_ratio = result.rate_last / result.rate_first if result.rate_first else 0.0
    _read_back(out, urls, result)
    return result


def report(result: SoakResult, command: str) -> str:
    """The Markdown table of one soak, with its targets."""
    n, tenth, r = result.urls, f"{result.urls // 10:,}", result
    once_ok = r.duplicates == 0 and r.gaps == 0
    growth_ok = r.rss_growth_mib <= RSS_GROWTH_TARGET_MIB
    rows = [
        (f"RSS after the last run's first {tenth} inputs", f"{r.rss_early_mib:.1f} MiB", ""),
        (f"RSS at the end ({n:,} inputs)", f"{r.rss_end_mib:.1f} MiB", ""),
        ("RSS growth", f"{r.rss_growth_mib:+.1f} MiB",
         f"<= {RSS_GROWTH_TARGET_MIB:.0f} MiB: {common.met(growth_ok)}"),
        (f"throughput, last run's first {tenth}", f"{r.rate_first:,.0f} inputs/s", ""),
        (f"throughput, job's last {tenth}", f"{r.rate_last:,.0f} inputs/s", ""),
        ("ratio last / first", f"{r.rate_ratio:.2f}",
         f">= {THROUGHPUT_TARGET}: {common.met(r.rate_ratio >= THROUGHPUT_TARGET)}"),
        ("killed (SIGKILL) at committed input", ", ".join(f"{k:,}" for k in r.kills), "3 kills"),
        ("samples + failure records read back",
         f"{r.samples:,} + {sum(r.failures.values()):,}", f"{n:,}"),
        ("duplicates / gaps", f"{r.duplicates} / {r.gaps}", f"0 / 0: {common.met(once_ok)}"),
        ("failures by reason", ", ".join(f"{k} {v:,}" for k, v in r.failures.items()),
         f"{common.ERROR_RATE:.0%} scheduled"),
        ("outcomes that differ from the fate table", f"{r.unexpected_outcomes:,}", ""),
        ("wall time, 4 runs", f"{r.seconds:,.0f} s", ""),
        ("last run's RSS at each tenth (input: MiB)",
         ", ".join(f"{end:,}: {rss:.1f}" for end, rss in r.rss_curve), ""),
    ]  # fmt: skip
    context = (
        f"Command: `{command}`; shards of {r.shard_samples:,} inputs; the last run "
        f"started at input {r.last_run_start:,}."
    )
    return common.report(f"Soak: {n:,} URLs, 3 kills and resumes", context, rows)


def main(argv: list[str] | None = None) -> int:
    """Run the soak and print (and optionally save) its table."""
    options = common.parser(__doc__, 1_000_000)
    options.add_argument("--workdir", help="where urls.txt and out/ go (default: a temp dir)")
    options.add_argument("--json", help="write the figures as JSON to this file")
    args = options.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="aioloader-soak-") as scratch:
        workdir = Path(args.workdir or scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        result = soak(args.urls, workdir, sys.stderr)
    table = report(result, common.command_line("soak_ingest.py", argv))
    common.publish(table, args, asdict(result))
    return 0 if result.duplicates == 0 and result.gaps == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
