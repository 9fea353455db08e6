"""The machinery of ``benchmarks/run.py``: cases, interleaved rounds, machine facts, reports.

A ``Case`` is one system on one workload: ``measure()`` returns one number (its metric).
``run_interleaved`` runs every case once per round, in the same order (A B C A B C ...),
drops the first round (warm-up) and keeps the rest, so slow drifts of a shared machine
touch every case alike. Reports give the median, min and max of the kept rounds and the
ratio of medians to the workload's baseline, all from the same run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from aioloader._progress import Progress

PACKAGES = (
    "aioloader",
    "numpy",
    "numba",
    "pillow",
    "anyio",
    "uvloop",
    "trio",
    "torch",
    "torchdata",
    "spdl",
    "grain",
    "matplotlib",
    "img2dataset",
    "webdataset",
    "aiohttp",
    "pillow",
)


class Port:
    """One loader set up for a workload: ``batches(stop)`` yields steps ``[0, stop)``."""

    name = ""
    group = ""
    note = ""

    def batches(self, stop: int) -> contextlib.AbstractContextManager[Iterator[Any]]:
        raise NotImplementedError

    def release(self, batch: Any) -> None:
        """Give a consumed batch back (pooled batches); nothing by default."""

    def measure(self, warm: int, count: int) -> float:
        """Batches per second over ``count`` batches, after ``warm`` untimed ones."""
        seen = 0
        started = 0.0
        with self.batches(warm + count) as batches:
            for batch in batches:
                if seen == warm:
                    started = time.perf_counter()
                self.release(batch)
                seen += 1
            ended = time.perf_counter()
        if seen != warm + count:
            raise RuntimeError(f"{self.name} gave {seen} batches, not {warm + count}")
        return count / (ended - started)


@dataclasses.dataclass
class Case:
    """One system on one workload.

    Attributes:
        workload: ``"W1"``, ``"W3"``, ...
        system: The row's name.
        metric: What ``measure()`` returns, with its unit (``"batches/s"``).
        measure: Runs the system once and returns the metric.
        higher_is_better: False for times.
        baseline: The row the workload's ratios divide by.
        group: The family (``"aioloader"``, ``"torch"``, ...), for targets and the plot.
        note: One line on how the port works.
        facts: Static numbers of the case (measured once, not per round).
        compare_to: The system (same workload) this row's ratio divides by, when it is not
            the workload's baseline (W2: the aiohttp row of the same path and reads).
    """

    workload: str
    system: str
    metric: str
    measure: Callable[[], float]
    higher_is_better: bool = True
    baseline: bool = False
    group: str = ""
    note: str = ""
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    compare_to: str | None = None
    values: list[float] = dataclasses.field(default_factory=list)
    error: str | None = None

    def summary(self) -> dict[str, Any]:
        """Median, min, max and the kept values (``None`` when the case failed)."""
        if not self.values:
            return {"median": None, "min": None, "max": None, "values": []}
        return {
            "median": statistics.median(self.values),
            "min": min(self.values),
            "max": max(self.values),
            "values": list(self.values),
        }


def port_case(
    workload: str,
    port: Port,
    metric: str,
    warm: int,
    count: int,
    baseline: bool = False,
    facts: dict[str, Any] | None = None,
) -> Case:
    """The case of ``port``: ``port.measure(warm, count)`` each round, named as the port."""
    return Case(
        workload=workload,
        system=port.name,
        metric=metric,
        measure=lambda: port.measure(warm, count),
        baseline=baseline,
        group=port.group,
        note=port.note,
        facts=dict(facts or {}),
    )


def run_interleaved(
    cases: Sequence[Case], rounds: int, log: Callable[[str], None] = print
) -> float:
    """Run every case once per round (plus a warm-up round, dropped); returns seconds taken."""
    started = time.perf_counter()
    bar = Progress((rounds + 1) * len(cases), "measurements")
    for round_index in range(rounds + 1):
        label = "warm-up" if round_index == 0 else f"round {round_index}/{rounds}"
        round_started = time.perf_counter()
        for case in cases:
            bar.advance(1, label)
            if case.error is not None:
                continue
            try:
                value = case.measure()
            except Exception as error:  # a port that breaks is reported, not fatal
                case.error = f"{type(error).__name__}: {error}"
                log(f"  {case.workload} {case.system}: FAILED {case.error}")
                log(traceback.format_exc())
                continue
            if round_index > 0:
                case.values.append(value)
        log(f"{label}: {time.perf_counter() - round_started:.1f} s")
    return time.perf_counter() - started


def ratio(case: Case, baseline: Case | None) -> float | None:
    """How many times better than the baseline (medians; > 1 is better)."""
    if baseline is None or not case.values or not baseline.values:
        return None
    mine, theirs = statistics.median(case.values), statistics.median(baseline.values)
    if case.higher_is_better:
        return mine / theirs if theirs else None
    return theirs / mine if mine else None


def baseline_of(cases: Sequence[Case], workload: str) -> Case | None:
    """The baseline case of a workload."""
    return next((c for c in cases if c.workload == workload and c.baseline), None)


def reference_of(cases: Sequence[Case], case: Case) -> Case | None:
    """What ``case``'s ratio divides by: its ``compare_to`` row, else the baseline."""
    if case.compare_to is not None:
        return next(
            (c for c in cases if c.workload == case.workload and c.system == case.compare_to),
            None,
        )
    return baseline_of(cases, case.workload)


# -- machine facts ----------------------------------------------------------------------
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_facts() -> dict[str, Any]:
    """Cores, CPU, memory, Python, package versions and the load average now."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 0
    memory = None
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        memory = round(pages * page_size / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gib": memory,
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "packages": {name: _version(name) for name in PACKAGES},
        "load_average_start": _load(),
    }


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# -- reports ----------------------------------------------------------------------------
def _fmt(value: float | None, metric: str) -> str:
    if value is None:
        return "n/a"
    if metric.startswith("ms") or metric.endswith("(ms)"):
        return f"{value:,.3f}" if value < 10 else f"{value:,.1f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:,.2f}"
    return f"{value:.3g}"


def _ratio_text(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}x" if value < 10_000 else f"{value:.2g}x"


def to_json(
    cases: Sequence[Case],
    facts: dict[str, Any],
    settings: dict[str, Any],
    targets: list[dict[str, Any]],
    notes: dict[str, list[str]],
) -> dict[str, Any]:
    """Everything of a run, as plain data."""
    rows = []
    for case in cases:
        base = reference_of(cases, case)
        rows.append(
            {
                "workload": case.workload,
                "system": case.system,
                "group": case.group,
                "metric": case.metric,
                "higher_is_better": case.higher_is_better,
                "baseline": case.baseline,
                "ratio_to_baseline": ratio(case, base),
                "compared_to": base.system if base is not None else None,
                "note": case.note,
                "facts": case.facts,
                "error": case.error,
                **case.summary(),
            }
        )
    return {
        "machine": facts,
        "settings": settings,
        "results": rows,
        "targets": targets,
        "notes": notes,
    }


def to_markdown(data: dict[str, Any], titles: dict[str, str]) -> str:
    """The results as a markdown document: header, one table per workload, targets."""
    machine, settings = data["machine"], data["settings"]
    packages = ", ".join(f"{k} {v}" for k, v in machine["packages"].items())
    lines = [
        "# aioloader benchmarks",
        "",
        f"Command: `{settings['command']}`  ",
        f"Date (UTC): {machine['date_utc']}; {settings['rounds']} rounds after a dropped "
        f"warm-up round, systems interleaved in every round; run took "
        f"{settings['seconds']:.0f} s.  ",
        f"Machine: {machine['cpu']}, {machine['cores']} cores ({machine['usable_cores']} "
        f"usable), {machine['memory_gib']} GiB; {machine['platform']}.  ",
        f"Python: {machine['python']}; {packages}.  ",
        f"Load average (1, 5, 15 min): {machine['load_average_start']} at the start, "
        f"{machine.get('load_average_end')} at the end.",
        "",
        "Values are medians of the kept rounds with their min-max; ratios are medians "
        "divided by the workload's baseline row (> 1 is better, also for times).",
    ]
    rows = data["results"]
    for workload, title in titles.items():
        mine = [r for r in rows if r["workload"] == workload]
        if not mine:
            continue
        lines += ["", f"## {workload}: {title}", ""]
        fact_keys: list[str] = []
        for r in mine:
            for key in r["facts"]:
                if key not in fact_keys:
                    fact_keys.append(key)
        header = ["system", mine[0]["metric"] + " (median)", "min-max", "vs baseline"]
        lines.append("| " + " | ".join(header + fact_keys) + " |")
        lines.append("|" + "---|" + "---:|" * (len(header) - 1 + len(fact_keys)))
        for r in mine:
            name = r["system"] + (" (baseline)" if r["baseline"] else "")
            if r["error"]:
                cells = [name, "failed", r["error"][:80], "n/a"]
            else:
                cells = [
                    name,
                    _fmt(r["median"], r["metric"]),
                    f"{_fmt(r['min'], r['metric'])}-{_fmt(r['max'], r['metric'])}",
                    _ratio_text(r["ratio_to_baseline"]),
                ]
            cells += [_fact(r["facts"].get(key)) for key in fact_keys]
            lines.append("| " + " | ".join(cells) + " |")
        for note in data["notes"].get(workload, []):
            lines.append("")
            lines.append(note)
    if data["targets"]:
        lines += ["", "## Targets", "", "| target | measured | met |", "|---|---|---|"]
        for t in data["targets"]:
            met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
            lines.append(f"| {t['target']} | {t['measured']} | {met} |")
    return "\n".join(lines) + "\n"


def _fact(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return _fmt(value, "")
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """``data`` as indented JSON."""
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def python_command() -> str:
    """The command line that started this process, as a person would type it."""
    argv = [Path(sys.argv[0]).as_posix(), *sys.argv[1:]]
    return "python " + " ".join(argv)


# -- targets ------------------------------------------------------------------------------
def median(case: Case | None) -> float | None:
    """The case's median, or None without a case."""
    return Case.summary(case)["median"] if case is not None else None


def best(cases: Sequence[Case], workload: str, group: str, prefix: str = "") -> Case | None:
    """The best measured row of ``group`` in ``workload`` whose name starts with ``prefix``."""
    mine = [
        c
        for c in cases
        if c.workload == workload and c.group == group and c.values and c.system.startswith(prefix)
    ]
    if not mine:
        return None
    pick = max if mine[0].higher_is_better else min
    return pick(mine, key=lambda c: Case.summary(c)["median"])


def target(text: str, mine: Case | None, theirs: Case | None, at_least: float) -> dict[str, Any]:
    """The target ``median(mine) / median(theirs) >= at_least``, measured."""
    if mine is None or theirs is None:
        return {"target": text, "measured": "n/a (a row is missing)", "met": None}
    a, b = median(mine), median(theirs)
    value = a / b if a and b else 0.0
    return {
        "target": text,
        "measured": f"{value:.2f}x ({mine.system} {a:,.0f} vs {theirs.system} {b:,.0f})",
        "ratio": value,
        "met": value >= at_least,
    }


def auto_target(cases: Sequence[Case], workload: str, auto: str, picked: Sequence[str]) -> Any:
    """Issue 21: the ``auto`` row >= 0.95x the best of the ``picked`` hand-set rows.

    The rows were checked to give the same batches before timing (the same digest).
    """
    rows = {c.system: c for c in cases if c.workload == workload and c.values}
    candidates = [rows[name] for name in picked if name in rows]
    best_row = max(candidates, key=lambda c: median(c) or 0.0) if candidates else None
    text = f"{workload}: {auto} >= 0.95x the best hand-picked setting (same batches)"
    return target(text, rows.get(auto), best_row, 0.95)


def fact_target(text: str, measured: str, met: bool | None) -> dict[str, Any]:
    """A target that is not a ratio of two rows."""
    return {"target": text, "measured": measured, "met": met}


# -- what is installed ----------------------------------------------------------------------
def installed_rows(
    workload: str,
    optional: Sequence[tuple[str, Callable[[], list[Any]]]],
    log: Callable[[str], None],
) -> list[Any]:
    """The rows ``build()`` of each ``(module, build)`` whose module imports; a missing
    module's rows are left out, and the log says so."""
    rows: list[Any] = []
    for module, build in optional:
        try:
            __import__(module)
        except ImportError as error:
            log(f"  {workload}: {module} is not installed ({error}); its rows are left out")
            continue
        rows += build()
    return rows


def can_run(
    workload: str, modules: Sequence[str], log: Callable[[str], None], weed: bool = False
) -> bool:
    """Whether ``modules`` import (and, with ``weed``, SeaweedFS is found); else log why."""
    try:
        for module in modules:
            __import__(module)
        if weed:
            from tests._support.s3 import find_weed

            find_weed()
    except Exception as error:  # any missing piece: the workload is left out, and said so
        log(f"  {workload} left out: {type(error).__name__}: {error}")
        return False
    return True


# -- a row in a child process: "MARK [name]" lines, each answered, then "RESULT {json}" --------
def child_say(line: str) -> None:
    """In a child: one protocol line on the real stdout (logs go to stderr)."""
    stdout = sys.__stdout__
    assert stdout is not None
    stdout.write(line + "\n")
    stdout.flush()


def child_mark(name: str = "") -> None:
    """In a child: a mark the parent reads its counters at; returns once it has."""
    child_say(f"MARK {name}".rstrip())
    sys.stdin.readline()


def run_child(
    command: list[str],
    env: dict[str, str],
    cwd: Path,
    timeout: float,
    on_mark: Callable[[str], None],
) -> tuple[dict[str, Any] | None, bool, int | None]:
    """Run a child that speaks the protocol; ``on_mark(name)`` runs before each answer.

    Returns the child's result (None if it sent none), whether the watchdog killed it
    after ``timeout`` seconds, and its exit code.
    """
    import subprocess
    import threading

    child = subprocess.Popen(
        command,
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        child.kill()

    watchdog = threading.Timer(timeout, kill)
    watchdog.start()
    result: dict[str, Any] | None = None
    try:
        assert child.stdout is not None
        assert child.stdin is not None
        for line in child.stdout:
            if line.startswith("MARK"):
                on_mark(line[len("MARK") :].strip())
                child.stdin.write("ok\n")
                child.stdin.flush()
            elif line.startswith("RESULT "):
                result = json.loads(line[len("RESULT ") :])
        child.wait(60)
    finally:
        watchdog.cancel()
        if child.poll() is None:
            child.kill()
            child.wait()
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()
    return result, timed_out.is_set(), child.returncode
