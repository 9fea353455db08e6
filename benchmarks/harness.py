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


class Port:
    """One loader set up for a workload: ``batches(stop)`` yields steps ``[0, stop)``.

    ``exact``: whether its batches must equal the reference bit for bit (not only in shape).
    """

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


class StepBuilder:
    """``g -> batch``: plan step ``g``, gather its samples, ``work`` each, ``collate(samples,
    plan)``; with ``fields``, the batch's arrays as a dict. For SPDL and Grain.

    ``parts()`` makes ``(sampler, collate)``. Picklable for spawned workers: they call
    ``parts()`` again, and ``rebuild()`` (when given) to remake the data instead of
    receiving it.
    """

    def __init__(
        self,
        seed: int,
        parts: Callable[[], tuple[Any, Callable[[list[Any], Any], Any]]],
        data: list[Any] | None = None,
        rebuild: Callable[[], list[Any]] | None = None,
        work: Callable[[Any], Any] | None = None,
        fields: Sequence[str] = (),
    ) -> None:
        self.seed, self.parts, self.data, self.rebuild = seed, parts, data, rebuild
        self.work, self.fields = work, tuple(fields)
        self.sampler, self.collate = parts()

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in vars(self).items() if k not in ("sampler", "collate")}
        if self.rebuild is not None:
            state["data"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self.sampler, self.collate = self.parts()

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
    """``batch -> {name: array}``: a dict batch's entries (those it has) or a batch's
    attributes, for ``verify``."""

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
    log: Callable[[str], None],
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
                if a.shape != b.shape:
                    raise AssertionError(
                        f"{port.name}: step {step} {name} shape {a.shape} != {b.shape}"
                    )
                if port.exact and (a.dtype != b.dtype or a.tobytes() != b.tobytes()):
                    raise AssertionError(f"{workload} {port.name}: step {step} {name} differs")
        kind = "bit-identical" if port.exact else "same shapes"
        log(f"  {workload} {port.name}: {len(got)} batches {kind}")


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
    scale: int = 1,
) -> Case:
    """The case of ``port``: ``scale x port.measure(warm, count)`` each round (``scale``:
    samples per batch for a per-sample metric), named as the port."""
    return Case(
        workload=workload,
        system=port.name,
        metric=metric,
        measure=lambda: scale * port.measure(warm, count),
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


PEERS_ENV = "AIOLOADER_BENCH_PEERS"


def use_peer_paths(extra: Sequence[str] = ()) -> list[str]:
    """Make peers installed outside the venv importable here and in every child process.

    A peer whose requirements clash with the venv's (img2dataset's pandas, OpenCV, wandb...)
    is installed into a folder of its own, ``pip install --target DIR``; ``extra`` and the
    ``os.pathsep``-separated folders in ``$AIOLOADER_BENCH_PEERS`` are *appended* to
    ``sys.path`` (so the venv's numpy, pyarrow, webdataset... win over copies in DIR), and
    all of them are written back to the variable, which the rows' child processes inherit.

    Returns:
        The peer folders now on ``sys.path``.

    Raises:
        ValueError: A folder does not exist.
    """
    found = [p for p in os.environ.get(PEERS_ENV, "").split(os.pathsep) if p]
    folders = list(dict.fromkeys([*found, *(os.fspath(p) for p in extra)]))
    for folder in folders:
        if not os.path.isdir(folder):
            raise ValueError(
                f"peer path (--peer-path or ${PEERS_ENV}) must be an existing folder "
                f"but got {folder!r}"
            )
        if folder not in sys.path:
            sys.path.append(folder)
    if folders:
        os.environ[PEERS_ENV] = os.pathsep.join(folders)
    return folders


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


def child_main(run: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """In a child: ``run`` the spec given as JSON in ``argv[1]``, send ``RESULT {json}``, exit.

    Only the protocol lines go to stdout; ``os._exit`` ends the peers' worker processes and
    portal threads with us.
    """
    spec = json.loads(sys.argv[1])
    with contextlib.redirect_stdout(sys.stderr):
        result = run(spec)
    child_say("RESULT " + json.dumps(result))
    os._exit(0)


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` in seconds (0 when it has gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
