"""``workers="auto"`` / ``prefetch="auto"``: bounds, and the tuner that turns the knobs.

The tuner belongs to a loader and outlives its streams, so a later epoch starts where the
last one ended. Every ``every`` delivered steps it measures what the stream did since the
last decision (``LoaderCounters`` on the loader's clock), asks ``core._autotune.decide``
which knob to turn and applies the answer to the running work. A change of build threads
stays only if the next window is at least as fast; the ring and the reads only grow. Knobs
change how much runs at once, never what a step holds: batches stay bit-identical.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ..core._autotune import Decision, Knobs, TunerState, Window, decide
from ..core._check import positive_up_to
from ._config import LoaderCounters


def _default_max_workers() -> int:
    return min(8, os.cpu_count() or 1)


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
    """

    max_workers: int = field(default_factory=_default_max_workers)
    max_prefetch: int = 64
    max_inflight_reads: int = 1024
    every: int = 8
    min_window: float = 0.05
    wait_share: float = 0.05
    clock: Callable[[], float] = time.perf_counter

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


class TunableWork(Protocol):
    """A running stream's work as the tuner sees it."""

    @property
    def reads_peak(self) -> int:
        """The most reads in flight the stream has had."""

    def retune(self, knobs: Knobs) -> None:
        """Apply ``knobs`` to the running work (threads may shrink, the rest only grow)."""


@dataclass(slots=True)
class _Mark:
    clock: float
    consumer_wait: float
    read: float
    build: float


class AutoTuner:
    """A loader's knobs, their bounds and the log of every change it made."""

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
        )

    def begin(self, start: int) -> None:
        """A stream starts at global step ``start``: a window opens.

        Its first window fills the ring and is not judged. A thread change still on trial
        when the last stream ended goes back unjudged (the knobs apply to the new stream).
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

    def delivered(self, next_step: int, work: TunableWork) -> Decision | None:
        """A step was delivered: at an ``every``-th step of the stream that ends a window of
        at least ``min_window`` seconds, decide and apply.

        The window after a change of threads (and a stream's first) lets the ring turn
        over (at least ``prefetch`` steps, whatever its length in seconds) and is not
        judged, so a thread trial is measured against the window before it, both steady.
        """
        settings = self.settings
        if self._mark is None or (next_step - self._start) % settings.every:
            return None
        steps = next_step - self._mark_step
        if self._settling:  # ends once the ring has turned over: its depth in steps
            if steps < self.knobs.prefetch:
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
        )
        self._state, decision = decide(
            next_step,
            window,
            self._state,
            self.bounds,
            self.settings.wait_share,
            self._least_workers,
        )
        if decision is not None:
            self.decisions.append(decision)
            work.retune(self.knobs)
            self._settling = decision.knob == "workers"  # a trial is judged on a steady ring
        return decision
