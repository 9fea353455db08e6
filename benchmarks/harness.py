"""What ``benchmarks/run.py`` runs: ports, the check before timing, cases, interleaved rounds,
targets, and the protocol of rows run in a child process (W6, W8): marks, then a result file."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from aioloader._progress import Progress

Log = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Timing:
    """How a workload's rows run: ``warm`` batches before the clock starts, ``count`` timed,
    and the first ``verify`` steps checked against the reference before any timing."""

    warm: int
    count: int
    verify: int


class Port:
    """A system set up for a workload: ``batches(stop)`` yields the batches of steps ``[0, stop)``;
    where ``exact``, they must equal the reference bit for bit, not only in shape."""

    name = ""
    group = ""
    note = ""
    exact = True

    def batches(self, stop: int) -> contextlib.AbstractContextManager[Iterator[Any]]:
        raise NotImplementedError

    def release(self, batch: Any) -> None:
        """Give a consumed batch back (pooled batches have ``release``)."""
        release = getattr(batch, "release", None)
        if release is not None:
            release()

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


class Steps(Port):
    """A port whose batch of step ``g`` is ``self.step(g)``, built on the consumer's thread."""

    def step(self, g: int) -> Any:
        raise NotImplementedError

    @contextlib.contextmanager
    def batches(self, stop: int) -> Iterator[Iterator[Any]]:
        yield (self.step(g) for g in range(stop))


@dataclasses.dataclass(eq=False, repr=False)
class StepBuilder:
    """``g -> batch`` for SPDL and Grain: plan step ``g``, ``work`` each sample, ``collate(samples,
    plan)``; with ``fields``, the batch's arrays as a dict. ``parts()`` makes ``(sampler,
    collate)``; a pickled copy calls it again, and ``rebuild()`` (if given) for the data."""

    seed: int
    parts: Callable[[], tuple[Any, Callable[[list[Any], Any], Any]]]
    data: list[Any] | None = None
    rebuild: Callable[[], list[Any]] | None = None
    work: Callable[[Any], Any] | None = None
    fields: Sequence[str] = ()

    def __post_init__(self) -> None:
        self.sampler, self.collate = self.parts()

    def __reduce__(self) -> tuple[Any, ...]:
        data = None if self.rebuild is not None else self.data
        return type(self), (self.seed, self.parts, data, self.rebuild, self.work, self.fields)

    def __call__(self, g: int) -> Any:
        from aioloader.core import plan_batch

        if self.data is None:
            assert self.rebuild is not None
            self.data = self.rebuild()
        plan = plan_batch(self.sampler, self.seed, g)
        chosen = [self.data[i] for i in plan.indices.tolist()]
        if self.work is not None:
            chosen = [self.work(sample) for sample in chosen]
        batch = self.collate(chosen, plan)
        # The arrays leave with the element; the pool simply forgets them (no release).
        return {name: getattr(batch, name) for name in self.fields} if self.fields else batch


def fields(names: Sequence[str]) -> Callable[[Any], dict[str, Any]]:
    """``batch -> {name: array}`` for ``verify``: a dict's entries (those it has) or attributes."""

    def arrays(batch: Any) -> dict[str, Any]:
        if isinstance(batch, dict):
            return {name: batch[name] for name in names if name in batch}
        return {name: getattr(batch, name) for name in names}

    return arrays


def verify(
    workload: str,
    ports: Sequence[Port],
    steps: int,
    arrays: Callable[[Any], dict[str, Any]],
    log: Log,
    expected: list[dict[str, Any]] | None = None,
) -> None:
    """Every port gives ``expected`` (default: the first port's batches) as ``arrays(batch)``:
    the same shapes, and where ``port.exact`` the same dtypes and bytes. Raises otherwise."""
    import numpy as np

    for port in ports:
        got = []
        with port.batches(steps) as batches:
            for batch in batches:
                got.append({k: np.array(v, copy=True) for k, v in arrays(batch).items()})
                port.release(batch)
        if expected is None:
            expected = got
            continue
        if len(got) != len(expected):
            raise AssertionError(f"{port.name}: {len(got)} batches, expected {len(expected)}")
        for step, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
            if port.exact and mine.keys() != theirs.keys():
                raise AssertionError(f"{port.name}: step {step} has {sorted(mine)}")
            for name, a in mine.items():
                b = np.asarray(theirs[name])
                same = not port.exact or (a.dtype == b.dtype and a.tobytes() == b.tobytes())
                if a.shape != b.shape or not same:
                    raise AssertionError(f"{workload} {port.name}: step {step} {name} differs")
        kind = "bit-identical" if port.exact else "same shapes"
        log(f"  {workload} {port.name}: {len(got)} batches {kind}")


@dataclasses.dataclass
class Case:
    """One row: ``system`` on ``workload``; ``measure()`` runs it once and returns ``metric``.
    ``facts`` are measured once, not per round; ``compare_to`` names the row its ratio divides
    by when that is not the workload's baseline (W2: the aiohttp row of the same path)."""

    workload: str
    system: str
    metric: str
    measure: Callable[[], float]
    higher_is_better: bool = True
    baseline: bool = False
    group: str = ""  # the family: "aioloader", "torch", ...
    note: str = ""
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    compare_to: str | None = None
    values: list[float] = dataclasses.field(default_factory=list)  # the kept rounds
    error: str | None = None

    def summary(self) -> dict[str, Any]:
        """Median, min, max and the kept values (``None`` when the case failed)."""
        low, high = (min(self.values), max(self.values)) if self.values else (None, None)
        return {"median": median(self), "min": low, "max": high, "values": list(self.values)}


def port_case(
    workload: str,
    port: Port,
    metric: str,
    warm: int,
    count: int,
    baseline: bool = False,
    facts: dict[str, Any] | None = None,
    scale: int = 1,
) -> Case:
    """``port``'s row: ``scale x port.measure(warm, count)`` (``scale``: samples per batch)."""
    case = Case(workload, port.name, metric, lambda: scale * port.measure(warm, count))
    case.baseline, case.group, case.note = baseline, port.group, port.note
    case.facts = dict(facts or {})
    return case


def run_interleaved(cases: Sequence[Case], rounds: int, log: Log = print) -> float:
    """Every case once per round in a fixed order, so slow drifts of the machine touch all
    alike, after a warm-up round (dropped); returns the seconds taken."""
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


def median(case: Case | None) -> float | None:
    return statistics.median(case.values) if case is not None and case.values else None


def ratio(case: Case, baseline: Case | None) -> float | None:
    """How many times better than ``baseline`` (medians; > 1 is better, also for times)."""
    mine, theirs = median(case), median(baseline)
    if mine is None or theirs is None:
        return None
    if case.higher_is_better:
        return mine / theirs if theirs else None
    return theirs / mine if mine else None


def baseline_of(cases: Sequence[Case], workload: str) -> Case | None:
    return next((c for c in cases if c.workload == workload and c.baseline), None)


def reference_of(cases: Sequence[Case], case: Case) -> Case | None:
    """What ``case``'s ratio divides by: its ``compare_to`` row, else the baseline."""
    if case.compare_to is None:
        return baseline_of(cases, case.workload)
    same = (c for c in cases if c.workload == case.workload and c.system == case.compare_to)
    return next(same, None)


def best(cases: Sequence[Case], workload: str, group: str, prefix: str = "") -> Case | None:
    """The best measured row of ``group`` in ``workload`` whose name starts with ``prefix``."""
    mine = [c for c in cases if c.workload == workload and c.group == group and c.values]
    mine = [c for c in mine if c.system.startswith(prefix)]
    if not mine:
        return None
    return (max if mine[0].higher_is_better else min)(mine, key=lambda c: median(c) or 0.0)


def target(text: str, mine: Case | None, theirs: Case | None, at_least: float) -> dict[str, Any]:
    """The target ``median(mine) / median(theirs) >= at_least``, measured."""
    if mine is None or theirs is None:
        return fact_target(text, "n/a (a row is missing)", None)
    a, b = median(mine), median(theirs)
    value = a / b if a and b else 0.0
    measured = f"{value:.2f}x ({mine.system} {a:,.0f} vs {theirs.system} {b:,.0f})"
    return {"target": text, "measured": measured, "ratio": value, "met": value >= at_least}


def auto_target(cases: Sequence[Case], workload: str, auto: str, picked: Sequence[str]) -> Any:
    """Issue 21: the ``auto`` row >= 0.95x the best ``picked`` row (checked to match before)."""
    rows = {c.system: c for c in cases if c.workload == workload and c.values}
    candidates = [rows[name] for name in picked if name in rows]
    best_row = max(candidates, key=lambda c: median(c) or 0.0) if candidates else None
    text = f"{workload}: {auto} >= 0.95x the best hand-picked setting (same batches)"
    return target(text, rows.get(auto), best_row, 0.95)


def fact_target(text: str, measured: str, met: bool | None) -> dict[str, Any]:
    """A target that is not a ratio of two rows."""
    return {"target": text, "measured": measured, "met": met}


def installed_rows(
    workload: str, optional: Sequence[tuple[str, Callable[[], list[Any]]]], log: Log
) -> list[Any]:
    """``build()`` of each ``(module, build)`` whose module imports; logs the others."""
    rows: list[Any] = []
    for module, build in optional:
        if can_run(f"{workload} {module} rows", [module], log):
            rows += build()
    return rows


def can_run(workload: str, modules: Sequence[str], log: Log, weed: bool = False) -> bool:
    """Whether ``modules`` import (and, with ``weed``, SeaweedFS is found); else log why."""
    try:
        for module in modules:
            __import__(module)
        if weed:
            from tests._support.s3 import find_weed

            find_weed()
    except Exception as error:  # any missing piece: left out, and the log says so
        log(f"  {workload} left out: {type(error).__name__}: {error}")
        return False
    return True


PEERS_ENV = "AIOLOADER_BENCH_PEERS"


def use_peer_paths(extra: Sequence[str] = ()) -> list[str]:
    """Append ``extra`` and ``$AIOLOADER_BENCH_PEERS``'s folders (``pip install --target DIR``)
    to ``sys.path``, after the venv's packages, and to the variable for child processes."""
    found = [p for p in os.environ.get(PEERS_ENV, "").split(os.pathsep) if p]
    folders = list(dict.fromkeys([*found, *map(os.fspath, extra)]))
    for folder in folders:
        if not os.path.isdir(folder):
            raise ValueError(f"peer path {folder!r} (--peer-path or ${PEERS_ENV}) is not a folder")
        if folder not in sys.path:
            sys.path.append(folder)
    if folders:
        os.environ[PEERS_ENV] = os.pathsep.join(folders)
    return folders


# A row in a child process: "MARK [name]" lines, each answered; its result, a JSON file.
# (Not a stdout line: a result past the pipe's 64 KiB once came back broken near 64 KiB.)
RESULT_ENV = "AIOLOADER_BENCH_RESULT"


def child_mark(name: str = "") -> None:
    """In a child: a mark the parent reads its counters at; returns once it has."""
    print(f"MARK {name}".rstrip(), file=sys.__stdout__, flush=True)  # logs go to stderr
    sys.stdin.readline()


def child_main(run: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """In a child: ``run`` the JSON spec of ``argv[1]``, its prints sent to stderr, write the
    result to the file ``$AIOLOADER_BENCH_RESULT`` names, then ``os._exit``, which ends the
    peers' worker processes and threads too."""
    spec = json.loads(sys.argv[1])
    with contextlib.redirect_stdout(sys.stderr):
        result = run(spec)
    path = Path(os.environ[RESULT_ENV])
    temp = path.with_name(path.name + ".part")
    temp.write_text(json.dumps(result))
    temp.replace(path)  # whole or absent
    os._exit(0)


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` in seconds (0 when it has gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def run_child(
    command: list[str], env: dict[str, str], cwd: Path, timeout: float, on_mark: Log
) -> tuple[dict[str, Any] | None, bool, int | None]:
    """Run a child that speaks the protocol, ``on_mark(name)`` before answering each mark: its
    result (None if it sent none), whether it was killed after ``timeout`` s, its exit code."""
    import subprocess
    import tempfile
    import threading

    pipe = subprocess.PIPE
    timed_out = threading.Event()
    folder = tempfile.TemporaryDirectory(prefix="aioloader-bench-")
    result_path = Path(folder.name) / "result.json"
    env = {**os.environ, **env, RESULT_ENV: str(result_path)}
    with (
        folder,
        subprocess.Popen(command, cwd=cwd, stdin=pipe, stdout=pipe, text=True, env=env) as child,
    ):  # closes the pipes and waits for the child
        assert child.stdin is not None
        assert child.stdout is not None
        watchdog = threading.Timer(timeout, lambda: (timed_out.set(), child.kill()))
        watchdog.start()
        try:
            for line in child.stdout:
                if line.startswith("MARK"):
                    on_mark(line.removeprefix("MARK").strip())
                    child.stdin.write("ok\n")
                    child.stdin.flush()
            child.wait(60)
        finally:
            watchdog.cancel()
            child.kill()  # a no-op once it has ended
        result = json.loads(result_path.read_text()) if result_path.exists() else None
    return result, timed_out.is_set(), child.returncode
