"""``workers="auto"`` / ``prefetch="auto"``: bounds, and the tuner that turns the knobs.

The tuner belongs to a loader and outlives its streams, so a later epoch starts where the
last one ended. Every ``every`` delivered steps it measures what the stream did since the
last decision (``LoaderCounters`` on the loader's clock), asks ``core._autotune.tune``
which knob to turn and applies the answer to the running work. A change of build threads
stays only if the next window is at least as fast; the ring and the reads only grow. Knobs
change how much runs at once, never what a step holds: batches stay bit-identical.

With ``workers="auto"`` it also chooses the executor: a ``BuildMeter`` times every build on
a thread (the thread's own CPU time against the wall), and when threads busy building use
about one core between them (their builds hold the GIL) the steps move to the loader's
worker processes; later, threads are tried again (``core._autotune.tune``). Transforms that
cannot reach processes (they do not pickle) keep auto on threads, logged once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from ..core import Decision, ExecutorRule, Knobs, TunerState, Window, positive_up_to, tune
from ._config import LoaderCounters

logger = logging.getLogger("aioloader")
ResultT = TypeVar("ResultT")


def _host_cores() -> int:
    """The cores this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def _default_max_workers() -> int:
    return min(8, _host_cores())


def _default_max_processes() -> int:
    return max(1, _host_cores() - 1)


@dataclass(frozen=True, slots=True)
class AutoTune:
    """Bounds and pace of ``workers="auto"`` and ``prefetch="auto"``.

    Attributes:
        max_workers: most build threads (``workers="auto"`` starts there and tries fewer,
            down to building inline, when builds hold the GIL).
        max_prefetch: deepest ring (``prefetch="auto"`` starts at twice the threads, at
            least 2).
        max_inflight_reads: most reads in flight per stream (with ``prefetch="auto"``,
            starting at the loader's ``max_inflight_reads``).
        every: decide after every ``every`` delivered steps (the window grows by ``every``
            until it lasts ``min_window`` seconds).
        min_window: shortest window judged, in seconds: a shorter one is mostly noise.
        wait_share: hold while the consumer waits less than this share of the time.
        clock: measures waits, reads and builds (seconds); inject one to drive tests.
        processes: whether ``workers="auto"`` may move builds that hold the GIL to worker
            processes (and back to threads when they are as fast).
        max_processes: worker processes it moves to (default: the host's cores - 1).
        cores: the host's cores (default: those this process may run on).
        min_busy_threads: threads busy building, on average over a window, below which
            the window says nothing about the GIL.
        probe_every: windows on processes before threads are tried again (each failed
            trial doubles the wait, up to 16 times).
        cpu_clock: a build thread's own CPU seconds (``time.thread_time``); inject one
            with ``clock`` to drive tests.
    """

    max_workers: int = field(default_factory=_default_max_workers)
    max_prefetch: int = 64
    max_inflight_reads: int = 1024
    every: int = 8
    min_window: float = 0.05
    wait_share: float = 0.05
    clock: Callable[[], float] = time.perf_counter
    processes: bool = True
    max_processes: int = field(default_factory=_default_max_processes)
    cores: int = field(default_factory=_host_cores)
    min_busy_threads: float = 1.5
    probe_every: int = 8
    cpu_clock: Callable[[], float] = time.thread_time

    def __post_init__(self) -> None:
        positive_up_to("AutoTune.max_workers", self.max_workers, 1 << 12)
        positive_up_to("AutoTune.max_prefetch", self.max_prefetch, 1 << 16)
        positive_up_to("AutoTune.max_inflight_reads", self.max_inflight_reads, 1 << 20)
        positive_up_to("AutoTune.every", self.every, 1 << 20)
        if not 0.0 <= self.min_window <= 3600.0:
            raise ValueError(
                f"AutoTune.min_window must be in [0, 3600] seconds but got {self.min_window!r}"
            )
        if not 0.0 <= self.wait_share < 1.0:
            raise ValueError(f"AutoTune.wait_share must be in [0, 1) but got {self.wait_share!r}")
        if not callable(self.clock):
            raise TypeError(f"AutoTune.clock must be callable but got {type(self.clock).__name__}")
        if not isinstance(self.processes, bool):
            raise TypeError(f"AutoTune.processes must be a bool but got {self.processes!r}")
        positive_up_to("AutoTune.max_processes", self.max_processes, 1 << 12)
        positive_up_to("AutoTune.cores", self.cores, 1 << 16)
        positive_up_to("AutoTune.probe_every", self.probe_every, 1 << 20)
        if not 0.0 <= self.min_busy_threads <= 4096.0:
            raise ValueError(
                f"AutoTune.min_busy_threads must be in [0, 4096] but got {self.min_busy_threads!r}"
            )
        if not callable(self.cpu_clock):
            raise TypeError(
                f"AutoTune.cpu_clock must be callable but got {type(self.cpu_clock).__name__}"
            )


class BuildMeter:
    """The CPU and wall seconds of every build on a thread, summed (thread-safe).

    A thread that waits for the GIL spends wall time but no CPU time of its own, so the two
    sums tell builds that hold the GIL from builds that release it.
    """

    __slots__ = ("_clock", "_cpu_clock", "_lock", "busy", "cpu")

    def __init__(self, clock: Callable[[], float], cpu_clock: Callable[[], float]) -> None:
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._lock = threading.Lock()
        self.cpu = 0.0
        self.busy = 0.0

    def timed(self, function: Callable[..., ResultT], *args: Any) -> ResultT:
        """``function(*args)``, its thread's CPU and wall seconds added to the sums."""
        clock, cpu_clock = self._clock, self._cpu_clock
        wall, cpu = clock(), cpu_clock()
        try:
            return function(*args)
        finally:
            cpu, wall = cpu_clock() - cpu, clock() - wall
            with self._lock:
                self.cpu += cpu
                self.busy += wall


class TunableWork(Protocol):
    """A running stream's work as the tuner sees it."""

    @property
    def reads_peak(self) -> int:
        """The most reads in flight the stream has had."""

    @property
    def starting_processes(self) -> bool:
        """Whether the worker processes it moved to are still starting."""

    def retune(self, knobs: Knobs) -> None:
        """Apply ``knobs`` to the running work (threads may shrink, the rest only grow)."""


@dataclass(slots=True)
class _Mark:
    clock: float
    consumer_wait: float
    read: float
    build: float
    build_cpu: float
    build_busy: float


class AutoTuner:
    """A loader's knobs, their bounds and the log of every change it made.

    ``processes_refused`` says why the executor stays on threads when processes could not
    be used (None while they can).
    """

    __slots__ = (
        "_counters",
        "_least_workers",
        "_mark",
        "_mark_step",
        "_settling",
        "_start",
        "_state",
        "bounds",
        "decisions",
        "meter",
        "processes_refused",
        "rule",
        "settings",
    )

    def __init__(
        self,
        settings: AutoTune,
        start: Knobs,
        bounds: Knobs,
        counters: LoaderCounters,
        *,
        tune_workers: bool = True,
    ):
        self.settings = settings
        self._state = TunerState(start)
        self.bounds = bounds
        self.decisions: list[Decision] = []
        self._counters = counters
        self._least_workers = 0 if tune_workers else start.workers
        processes = settings.max_processes if settings.processes and tune_workers else 0
        self.rule = ExecutorRule(
            processes=processes if bounds.workers > 0 else 0,
            cores=settings.cores,
            min_busy=settings.min_busy_threads,
            probe_every=settings.probe_every,
        )
        self.meter = BuildMeter(settings.clock, settings.cpu_clock)
        self.processes_refused: str | None = None
        self._mark: _Mark | None = None
        self._start = 0
        self._mark_step = 0
        self._settling = False  # the next window follows a change: it is not judged

    @property
    def knobs(self) -> Knobs:
        """The settings in use."""
        return self._state.knobs

    def _take_mark(self) -> _Mark:
        counters = self._counters
        return _Mark(
            self.settings.clock(),
            counters.consumer_wait_seconds,
            counters.read_seconds,
            counters.build_seconds,
            self.meter.cpu,
            self.meter.busy,
        )

    def begin(self, start: int) -> None:
        """A stream starts at global step ``start``: a window opens.

        Its first window fills the ring and is not judged. A change of threads or of the
        executor still on trial when the last stream ended goes back unjudged (the knobs
        apply to the new stream).
        """
        self._start = self._mark_step = start
        self._mark = self._take_mark()
        self._settling = True
        state = self._state
        if state.trial is not None:
            trial, threads = state.trial, state.knobs.workers
            self._state = state.back(state.slower)
            reason = "a new stream began before the trial was judged: back"
            self.decisions.append(Decision(start, "workers", threads, trial.old, reason))
        state = self._state
        if state.switch is not None:
            old, now = state.switch.old, state.knobs.processes
            self._state = state.switched_back()
            reason = "a new stream began before the trial was judged: back"
            self.decisions.append(Decision(start, "processes", now, old, reason))

    def refuse_processes(self, step: int, reason: str) -> None:
        """Processes cannot build this loader's steps: threads build from now on.

        Logged once; the change back (when on processes) joins the decisions.
        """
        if self.processes_refused is not None:
            return
        self.processes_refused = reason
        logger.warning(
            "aioloader: workers='auto' stays on threads: worker processes cannot build "
            "these steps (%s)",
            reason,
        )
        self.rule = replace(self.rule, processes=0)
        state = self._state
        if state.knobs.processes:
            old = state.knobs.processes
            knobs = replace(state.knobs, processes=0)
            self._state = replace(state, knobs=knobs, switch=None, streak=0, since=0)
            why = f"processes refused ({reason}): threads"
            self.decisions.append(Decision(step, "processes", old, 0, why))

    def delivered(self, next_step: int, work: TunableWork) -> Decision | None:
        """A step was delivered: at an ``every``-th step of the stream that ends a window of
        at least ``min_window`` seconds, decide and apply.

        The window after a change of threads or executor (and a stream's first) lets the
        ring turn over (at least ``prefetch`` steps, whatever its length in seconds, and
        until the processes moved to are ready) and is not judged, so a trial is measured
        against the window before it, both steady.
        """
        settings = self.settings
        if self._mark is None or (next_step - self._start) % settings.every:
            return None
        steps = next_step - self._mark_step
        if self._settling:  # ends once the ring has turned over (its depth in steps) and
            # the processes moved to are ready (their start-up is no part of a judged window)
            if steps < self.knobs.prefetch or work.starting_processes:
                return None
            self._mark, self._mark_step = self._take_mark(), next_step
            self._settling = False
            return None
        old, new = self._mark, self._take_mark()
        if new.clock - old.clock < settings.min_window:
            return None  # the window goes on
        self._mark, self._mark_step = new, next_step
        window = Window(
            elapsed=new.clock - old.clock,
            consumer_wait=new.consumer_wait - old.consumer_wait,
            read=new.read - old.read,
            build=new.build - old.build,
            reads_hit_limit=work.reads_peak >= self.knobs.reads,
            steps=steps,
            build_cpu=new.build_cpu - old.build_cpu,
            build_busy=new.build_busy - old.build_busy,
        )
        self._state, decision = tune(
            next_step,
            window,
            self._state,
            self.bounds,
            self.settings.wait_share,
            self._least_workers,
            self.rule,
        )
        if decision is not None:
            self.decisions.append(decision)
            work.retune(self.knobs)
            # a trial is judged on a steady ring
            self._settling = decision.knob in ("workers", "processes")
        return decision
