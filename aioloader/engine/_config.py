"""What a loader hands the parts of its streams: a frozen config, counters and a cursor.

``DataLoader`` checks its arguments once and freezes them in a ``LoaderConfig``; every
stream's ``StreamWork`` and ``BatchStream`` read that config, add to the loader's
``LoaderCounters`` and, when cursor-driven, advance its ``ResumeCursor``. None of them
reaches into the loader, so each module reads on its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..core import BatchPlan, Sampler, plan_batch
from ._bad_samples import ErrorPolicy, SkippedSample
from ._reads import ReadBound


@dataclass(frozen=True, slots=True)
class LoaderConfig:
    """A loader's checked arguments: what decides the stream and how it is computed.

    Attributes:
        dataset: what the user passed.
        sampler: decides the indices of every step.
        collator: ``collator(samples, plan) -> batch``.
        transform: ``transform(sample[, rng]) -> sample`` or None.
        takes_rng: whether ``transform`` takes an rng (derived once from its signature).
        seed: the run's seed.
        dataset_length: ``len(dataset)``, or None when the dataset has no length.
        workers: build threads (or processes) in use; 0 builds on the event loop.
        requested_workers: ``workers`` as passed (a threadless platform uses 0).
        executor: ``"thread"`` or ``"process"``.
        prefetch: ring slots per stream.
        max_inflight_reads: bound on concurrent reads per stream.
        on_error: the bad-sample policy; None raises (the default).
        persistent_workers: whether worker processes outlive a stream (``"process"``).
        clock: measures waits, reads and builds (``AutoTune.clock`` when autotuned).
    """

    dataset: Any
    sampler: Sampler
    collator: Callable[..., Any]
    transform: Callable[..., Any] | None
    takes_rng: bool
    seed: int
    dataset_length: int | None
    workers: int
    requested_workers: int
    executor: str
    prefetch: int
    max_inflight_reads: int
    on_error: ErrorPolicy | None = None
    persistent_workers: bool = False
    clock: Callable[[], float] = field(default=time.perf_counter)

    def plan(self, step: int) -> BatchPlan:
        """The plan of ``step``, its indices checked against the dataset."""
        plan = plan_batch(self.sampler, self.seed, step)
        indices = plan.indices
        if (
            not isinstance(indices, np.ndarray)
            or indices.ndim != 1
            or indices.dtype.kind not in "iu"
        ):
            shown = type(indices).__name__
            if isinstance(indices, np.ndarray):
                shown = f"{indices.ndim}-D {indices.dtype} array"
            raise TypeError(
                f"sampler.indices must return a 1-D integer numpy array but "
                f"{self.sampler!r} returned {shown}"
            )
        length = self.dataset_length
        if length is not None and indices.size:
            low, high = int(indices.min()), int(indices.max())
            if low < 0 or high >= length:
                bad = low if low < 0 else high
                raise IndexError(
                    f"sampler.indices must be in [0, len(dataset)) = [0, {length}) but "
                    f"{self.sampler!r} gave {bad}"
                )
        return plan


class RunningWork(Protocol):
    """A stream's work as the loader sees it while it runs."""

    @property
    def bound(self) -> ReadBound:
        """The stream's bound on concurrent reads (and its read counts)."""

    def cancel(self) -> None:
        """Stop the work (safe from any thread)."""

    async def wait_ended(self) -> None:
        """Wait until the work's tasks, reads and threads have ended."""


class LoaderCounters:
    """What the streams of one loader have done, updated by their parts.

    ``samples_skipped`` counts the samples replaced under ``on_error``; ``skipped`` keeps
    the first of them. ``running`` holds the works of the streams still running;
    ``reads_total`` the reads of the works that have ended (a running work counts its own
    in ``bound.total``).
    """

    __slots__ = (
        "batches_built",
        "batches_delivered",
        "build_seconds",
        "consumer_wait_seconds",
        "read_seconds",
        "reads_total",
        "running",
        "samples_skipped",
        "skipped",
    )

    def __init__(self) -> None:
        self.batches_delivered = 0
        self.batches_built = 0
        self.consumer_wait_seconds = 0.0
        self.read_seconds = 0.0
        self.build_seconds = 0.0
        self.reads_total = 0
        self.samples_skipped = 0
        self.skipped: list[SkippedSample] = []
        self.running: set[RunningWork] = set()

    def work_started(self, work: RunningWork) -> None:
        """Count ``work`` among the running ones."""
        self.running.add(work)

    def work_ended(self, work: RunningWork) -> None:
        """Move ``work``'s reads into ``reads_total`` and forget it."""
        self.running.discard(work)
        self.reads_total += work.bound.total
        work.bound.total = 0


class ResumeCursor:
    """The global step a cursor-driven stream starts from; delivered batches advance it."""

    __slots__ = ("step",)

    def __init__(self, step: int) -> None:
        self.step = step
