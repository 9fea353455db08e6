"""Steps built without the event loop: the consumer's step may hold it (``async for``).

A training step run inside ``async for`` holds the event loop for tens of milliseconds.
Builders that are tasks of that loop wait behind it: the step that a take lets into the
ring's window is claimed, planned and sent only when the consumer next awaits, and the
next take, finding its batch ready, does not await at all. A ``StepFeed`` instead claims
that step inside the take (the ring's ``on_take`` hook, a few microseconds on the taking
thread) and hands it to an executor that needs no loop:

- worker processes (``ProcessBuilders.submit``): a sender thread plans the step, the
  worker reads and builds it, the collector thread receives it;
- build threads (``FeedThreads``): one job plans the step and reads its first chunk; the
  other chunks are read by jobs of their own; the job that reads the last chunk builds the
  batch. A thread that finishes a job starts the next queued one itself.

Finished steps wait here (behind a lock) until a task of the loop moves them into the ring,
which only the consumer needs, and only when it awaits. A task of the loop also claims what
a take did not (the first steps, and a lending ring's steps when its batches are received).

Used when every part of a step runs off the loop: a sync dataset (read in the worker or in
the build thread), no ``on_error`` policy, a fixed ``workers``. Other streams keep their
builder tasks.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import anyio

from .._compat import add_note
from .._errors import LoaderClosedError
from .._event_loops import threadsafe_caller
from ..core import BatchPlan, release_batch
from ._build import build_batch
from ._config import LoaderConfig, LoaderCounters
from ._processes import ProcessBuilders
from ._reads import ReadBound, read_chunk, sync_getter
from ._ring import PrefetchRing, WouldBlock

Done = Callable[["Finished"], None]
"""Called once per step started, from any thread, with what became of it."""


class Finished:
    """What became of one step: its batch or error, the samples read, the seconds spent."""

    __slots__ = ("batch", "build_seconds", "error", "read_seconds", "reads", "step")

    def __init__(
        self,
        step: int,
        batch: Any,
        error: BaseException | None,
        reads: int = 0,
        read_seconds: float = 0.0,
        build_seconds: float = 0.0,
    ) -> None:
        self.step, self.batch, self.error = step, batch, error
        self.reads, self.read_seconds, self.build_seconds = reads, read_seconds, build_seconds


class StepStarter(Protocol):
    """Starts building a step off the loop; ``done`` runs once when it has finished."""

    def start(self, step: int, done: Done) -> Callable[[], None]:
        """Start ``step``; returns what abandons it (its batch, if any comes, is released)."""

    def close(self) -> None:
        """Stop (every step has been abandoned or has finished); blocking."""


class FeedProcesses:
    """Steps built by worker processes that read their samples themselves."""

    __slots__ = ("_builders", "_clock", "_plan")

    def __init__(self, builders: ProcessBuilders, config: LoaderConfig) -> None:
        self._builders = builders
        self._plan = config.plan
        self._clock = config.clock

    def start(self, step: int, done: Done) -> Callable[[], None]:
        """Send ``step`` to the least busy worker (planned in its sender thread)."""
        started = self._clock()
        reads = [0]

        def plan(planned: int) -> BatchPlan:
            found = self._plan(planned)
            reads[0] = found.size
            return found

        def finished(batch: Any, error: BaseException | None) -> None:
            done(Finished(step, batch, error, reads[0], 0.0, self._clock() - started))

        builders = self._builders
        job = builders.submit(step, plan, finished)
        return lambda: builders.abandon(job)

    def close(self) -> None:
        """Nothing: the processes belong to the loader's ``WorkerPool``."""


class _ThreadStep:
    """One step built by the feed's threads: planned, read in chunks, then built."""

    __slots__ = ("abandoned", "done", "errors", "lock", "parts", "plan", "samples", "step")

    def __init__(self, step: int, done: Done) -> None:
        self.step, self.done = step, done
        self.lock = threading.Lock()
        self.plan: BatchPlan | None = None
        self.samples: list[list[Any]] = []
        self.errors: dict[int, BaseException] = {}
        self.parts = 0  # chunks not yet read
        self.abandoned = False


class FeedThreads:
    """Build threads that plan, read (a sync dataset) and build whole steps.

    A step's reads are spread over the threads in chunks as the builder tasks spread them
    (``min(workers, batch size)`` chunks); the batch is built in the thread that reads the
    last chunk, so a step never waits for another thread to be free.
    """

    __slots__ = ("_clock", "_config", "_executor", "_getter", "workers")

    def __init__(self, workers: int, config: LoaderConfig) -> None:
        getter = sync_getter(config.dataset)
        assert getter is not None
        self.workers = workers
        self._config = config
        self._clock = config.clock
        self._getter = getter
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="aioloader-build")

    def start(self, step: int, done: Done) -> Callable[[], None]:
        """Queue ``step``'s first job (the plan and the first chunk)."""
        job = _ThreadStep(step, done)
        future = self._executor.submit(self._first, job)

        def abandon() -> None:
            job.abandoned = True
            future.cancel()

        return abandon

    def close(self) -> None:
        """Cancel the queued jobs and join the threads (a running job finishes first)."""
        self._executor.shutdown(wait=True, cancel_futures=True)

    def _first(self, job: _ThreadStep) -> None:
        started = self._clock()
        try:
            plan = self._config.plan(job.step)
        except Exception as error:
            add_note(error, f"aioloader: while planning global step {job.step}")
            job.done(Finished(job.step, None, error))
            return
        size = plan.size
        parts = 1 if self.workers <= 1 or size < 2 else min(self.workers, size)
        edges = [size * part // parts for part in range(parts + 1)]
        job.plan, job.parts, job.samples = plan, parts, [[] for _ in range(parts)]
        for part in range(1, parts):
            with contextlib.suppress(RuntimeError):  # shut down: the stream has ended
                self._executor.submit(self._read, job, part, edges[part], edges[part + 1])
        self._read(job, 0, edges[0], edges[1], started)

    def _read(
        self, job: _ThreadStep, part: int, first: int, last: int, started: float | None = None
    ) -> None:
        plan = job.plan
        assert plan is not None
        if started is None:
            started = self._clock()
        samples: list[Any] = []
        error: BaseException | None = None
        if job.abandoned:  # never delivered: the feed has closed
            error = LoaderClosedError("the stream has ended")
        else:
            try:
                samples = read_chunk(self._getter, plan, first, last)
            except BaseException as failure:
                error = failure
        with job.lock:
            if error is None:
                job.samples[part] = samples
            else:
                job.errors[part] = error
            job.parts -= 1
            last_part = job.parts == 0
        if last_part:
            self._build(job, self._clock() - started)

    def _build(self, job: _ThreadStep, read_seconds: float) -> None:
        plan = job.plan
        assert plan is not None
        if job.errors:
            error = job.errors[min(job.errors)]
            job.done(Finished(job.step, None, error, plan.size, read_seconds))
            return
        samples = [sample for part in job.samples for sample in part]
        job.samples = []
        started = self._clock()
        config = self._config
        try:
            batch = build_batch(plan, samples, config.transform, config.collator, config.takes_rng)
        except BaseException as error:  # SystemExit in a transform too: at its step
            job.done(Finished(job.step, None, error, plan.size, read_seconds))
            return
        job.done(Finished(job.step, batch, None, plan.size, read_seconds, self._clock() - started))


def feed_starter(
    config: LoaderConfig, workers: int, processes: ProcessBuilders | None
) -> StepStarter | None:
    """The executor a ``StepFeed`` can use for this stream, or None (builder tasks)."""
    if config.on_error is not None:  # repairs read in the parent, on the loop
        return None
    if processes is not None:
        return FeedProcesses(processes, config) if processes.reads_in_workers else None
    if config.executor == "thread" and workers > 0 and sync_getter(config.dataset) is not None:
        return FeedThreads(workers, config)
    return None


class StepFeed:
    """Claims the ring's steps as the window opens and fills them as they finish.

    Args:
        ring: The stream's prefetch ring (not lent to anyone else's ``on_take``).
        starter: Where steps are built (``feed_starter``).
        counters: The loader's counters (built batches, seconds).
        bound: The stream's read bound (its ``total`` counts the samples read).
    """

    def __init__(
        self,
        ring: PrefetchRing[Any],
        starter: StepStarter,
        counters: LoaderCounters,
        bound: ReadBound,
    ) -> None:
        self._ring = ring
        self._starter = starter
        self._counters = counters
        self._bound = bound
        self._lock = threading.Lock()
        self._finished: list[Finished] = []
        self._abandon: dict[int, Callable[[], None] | None] = {}  # steps in flight
        self._closed = False
        self._posted = False
        self._claims_done = False
        self._changed: anyio.Event | None = None
        self._call_soon = threadsafe_caller()

    # -- on the loop ------------------------------------------------------------------------
    def claim_now(self) -> None:
        """Claim and start every step the ring's window lets in now (the take hook)."""
        ring = self._ring
        while not self._closed:
            try:
                step = ring.claim_nowait()
            except WouldBlock:
                return
            if step is None:
                return
            self._start(step)

    def _start(self, step: int) -> None:
        with self._lock:
            self._abandon[step] = None
        try:
            abandon = self._starter.start(step, self._done)
        except Exception as error:  # closed or dead workers: the step's error
            with self._lock:
                self._abandon.pop(step, None)
            self._ring.fill_nowait(step, None, error)
            return
        with self._lock:
            if step in self._abandon:  # not finished yet
                self._abandon[step] = abandon

    async def run(self, beside: Callable[[], None]) -> None:
        """Claim, start and fill steps until the ring has none left; ``beside()`` each round.

        Ended or cancelled, it abandons the steps in flight, releases what finished and was
        not filled, and stops the starter's threads (waiting, off the loop, for a running
        build).
        """
        ring = self._ring
        ring.on_take(self.claim_now)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._claim)
                while True:
                    beside()
                    self._fill()
                    with self._lock:
                        idle = not self._abandon and not self._finished
                    if idle and self._claims_done:
                        return
                    changed = self._changed = anyio.Event()
                    with self._lock:
                        pending = bool(self._finished)
                    if not pending:
                        await changed.wait()
        finally:
            ring.on_take(None)
            self.close()
            with anyio.CancelScope(shield=True):  # a running build finishes: off the loop
                await anyio.to_thread.run_sync(self._starter.close)

    async def _claim(self) -> None:
        """Claim what no take did: the first steps, and those a lending ring lets in."""
        ring = self._ring
        while (step := await ring.claim()) is not None:
            self._start(step)
            self.claim_now()
        self._claims_done = True
        self._wake()

    def _fill(self) -> None:
        with self._lock:
            finished, self._finished = self._finished, []
            self._posted = False
        ring, counters = self._ring, self._counters
        for done in finished:
            counters.read_seconds += done.read_seconds
            counters.build_seconds += done.build_seconds
            self._bound.total += done.reads
            if done.error is None:
                counters.batches_built += 1
            ring.fill_nowait(done.step, done.batch, done.error)

    def _wake(self) -> None:
        changed = self._changed
        if changed is not None:
            self._changed = None
            changed.set()

    # -- any thread -------------------------------------------------------------------------
    def _done(self, finished: Finished) -> None:
        with self._lock:
            self._abandon.pop(finished.step, None)
            closed = self._closed
            post = not closed and not self._posted
            if not closed:
                self._finished.append(finished)
                self._posted = True
        if closed:
            release_batch(finished.batch)
        elif post:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self._call_soon(self._wake)

    def close(self) -> None:
        """Abandon the steps in flight and release the batches not filled."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            abandons = [abandon for abandon in self._abandon.values() if abandon is not None]
            self._abandon.clear()
            finished, self._finished = self._finished, []
        for abandon in abandons:
            abandon()
        for done in finished:
            release_batch(done.batch)


__all__ = ["FeedProcesses", "FeedThreads", "Finished", "StepFeed", "feed_starter"]
