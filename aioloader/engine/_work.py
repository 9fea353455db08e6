"""The work behind one stream: the ring, the builders that fill it, its threads and reads.

A ``StreamWork`` never refers to the consumer's handle (``BatchStream``), so dropping the
handle lets it be collected, and its ``__del__`` cancels the work.

The compiled batch kernels load off the loop: with ``AIOLOADER_KERNELS=numba`` the stream
loads them in a worker thread before its first step; with ``auto`` in a worker thread beside
the steps, once the cache holds them (numpy builds meanwhile). What runs on the loop (a
step built when taken, a plan made inline) never loads them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.abc

from .. import kernels
from .._compat import BaseExceptionGroup, add_note
from .._event_loops import spawn_system_task, threadsafe_caller
from ..core import BatchPlan, Knobs, release_batch
from ._autotune import AutoTuner
from ._bad_samples import StepRepairs
from ._build import TRANSFORM_SLOT, build_batch
from ._config import LoaderConfig, LoaderCounters
from ._feed import StepFeed, StepStarter, feed_starter
from ._plans import PlanAhead
from ._processes import ProcessBuilders
from ._reads import BatchReader, ReadBound, add_slot_note, make_batch_reader, make_sample_reader
from ._ring import PrefetchRing
from ._shared_build import SharedBuilds
from ._threads import BuildThreads
from ._worker_pool import WorkerPool

BatchT = TypeVar("BatchT")
ResultT = TypeVar("ResultT")
PLANS_PER_TRIP = 16
"""The most steps one trip to a build thread plans (with workers > 0)."""
logger = logging.getLogger("aioloader")


async def _in_any_thread(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in one of anyio's worker threads (streams without build threads)."""
    return await anyio.to_thread.run_sync(function, *args)


def _never_loading(function: Callable[..., ResultT], *args: Any) -> ResultT:
    """``function(*args)`` on a thread that must not load the kernels (an event loop's, a
    consumer's): inside ``loading_elsewhere()`` until nothing is left to load."""
    if kernels.settled():
        return function(*args)
    with kernels.loading_elsewhere():
        return function(*args)


async def _serve_reads(dataset: Any, group: anyio.abc.TaskGroup) -> None:
    """Start a source's background reads in ``group`` (``serve_reads``: a source that
    fetches what it reads ahead behind the steps), and wait until they serve."""
    serve = getattr(dataset, "serve_reads", None)
    if callable(serve):
        await group.start(serve)


def _is_cancellation(error: BaseException) -> bool:
    """Whether ``error`` is the backend's cancellation, alone or in a group of errors."""
    cancelled = anyio.get_cancelled_exc_class()
    if isinstance(error, BaseExceptionGroup):
        return error.subgroup(lambda inner: isinstance(inner, cancelled)) is not None
    return isinstance(error, cancelled)


class Unbuilt:
    """workers=0: a step planned and read ahead, built when the consumer takes it.

    Reads still run ``prefetch`` steps ahead; collation waits for the consumer, so at most
    the batch in hand and the one being built hold pooled buffers, which stay in cache.
    """

    __slots__ = ("plan", "samples")

    def __init__(self, plan: BatchPlan, samples: list[Any]) -> None:
        self.plan = plan
        self.samples = samples


class StreamWork(Generic[BatchT]):
    """Builds the steps ``[start, stop)`` into a prefetch ring until finished or cancelled.

    Reads its loader's frozen ``config`` and adds what it does to the loader's ``counters``.
    With ``first_alone`` (the loader's first stream) and threads, later steps begin their
    reads once the first batch is built, so that it has the reads and cores to itself.
    """

    def __init__(
        self,
        config: LoaderConfig,
        counters: LoaderCounters,
        start: int,
        stop: int | None,
        pool: WorkerPool | None = None,
        tuner: AutoTuner | None = None,
        first_alone: bool = True,
    ) -> None:
        self.config = config
        self._first_alone = first_alone  # later steps read once the first batch is built
        self._pool = pool  # the loader's worker processes (executor="process")
        self.counters = counters
        self.tuner = tuner  # workers="auto" / prefetch="auto": the loader's knobs
        if tuner is None:
            self.ring: PrefetchRing[BatchT] = PrefetchRing(
                config.prefetch, start, stop, release_batch
            )
            self.bound = ReadBound(config.max_inflight_reads)
        else:
            self.ring = PrefetchRing(
                tuner.bounds.prefetch, start, stop, release_batch, depth=tuner.knobs.prefetch
            )
            self.bound = ReadBound(tuner.knobs.reads)
        self._start = start
        self._stop = stop
        self._scope: anyio.CancelScope | None = None
        self._cancelled = False
        self._threads: BuildThreads | None = None
        self._shared: SharedBuilds | None = None  # builds on the threads, split when idle
        self._first_built: anyio.Event | None = None  # later steps read once it is set
        self._inline = False  # build when taken, with threads kept for reads (auto at 0)
        self._builders: anyio.abc.TaskGroup | None = None  # where retune adds builders
        self._builder_count = 0
        self._processes: ProcessBuilders | None = None
        self._use_processes = config.executor == "process"  # auto: the tuner's choice
        self._acquiring: anyio.Lock | None = None  # auto: one step starts the processes
        self._read: BatchReader | None = None
        self._read_one = make_sample_reader(config.dataset)
        ahead = config.prefetch if tuner is None else tuner.bounds.prefetch
        self._plans = PlanAhead(config.plan, stop, min(ahead, PLANS_PER_TRIP))
        self._steps_per_epoch = config.sampler.steps_per_epoch
        self._epoch_planned: int | None = None  # an epoch planned once: its steps inline
        self._loop_thread: int | None = None
        self._call_soon: Callable[[Callable[[], object]], object] | None = None
        self._ended: anyio.Event | None = None
        self._loading_kernels = False
        self.running = False

    # -- control ------------------------------------------------------------------------
    def cancel(self, *, from_finalizer: bool = False) -> None:
        """Stop claiming steps, release every batch built ahead, cancel the builders.

        Safe from any thread: from another thread the cancellation is posted to the loop.
        From a finalizer the scope is cancelled by a callback posted to the loop (trio keeps
        the frames of a cancelling call in a reference cycle), the ring closed at once.
        """
        on_loop = self._loop_thread is None or threading.get_ident() == self._loop_thread
        if on_loop:
            self._cancelled = True
            self.ring.close_nowait()
            if self._scope is not None:
                if from_finalizer and self._call_soon is not None:
                    with contextlib.suppress(RuntimeError):
                        self._call_soon(self._scope.cancel)  # a flag: it cannot fail
                    return
                self._scope.cancel()
        elif self._call_soon is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop runs nothing any more
                self._call_soon(self._cancel_on_loop)

    def _cancel_on_loop(self) -> None:
        # a callback of the loop itself: an error here (a batch's release failing) would
        # crash a trio run, so it is logged
        try:
            self.cancel()
        except Exception:
            logger.exception("aioloader: cancelling a stream failed")

    async def wait_ended(self) -> None:
        """Wait until the builders, their reads and threads have all ended."""
        if self._ended is not None:
            await self._ended.wait()

    @property
    def reads_peak(self) -> int:
        """The most reads in flight this stream has had."""
        return self.bound.peak

    @property
    def starting_processes(self) -> bool:
        """Whether the processes that auto moved to are starting (not all of them ready)."""
        if not self._use_processes:
            return False
        processes = self._processes
        return processes is None or processes.statistics().ready_seconds is None

    def retune(self, knobs: Knobs) -> None:
        """Apply the tuner's ``knobs``: build threads (none: build inline), a deeper ring,
        more reads, and the executor (from the next step that starts)."""
        if self._threads is not None:
            self._inline = knobs.workers == 0
            self._threads.resize(max(1, knobs.workers))
        self._use_processes = knobs.processes > 0 and self._pool is not None
        self.ring.deepen(knobs.prefetch)
        self.bound.raise_limit(knobs.reads)
        self._add_builders(knobs.prefetch)

    # -- hosting ----------------------------------------------------------------------------
    def spawn(self) -> None:
        """Run the work in a background task of the running event loop (bare ``async for``)."""
        self._prepare()
        self._task = spawn_system_task(self._run_hosted, name="aioloader-stream")

    async def _run_hosted(self) -> None:
        """``run`` in a background task: an error that escapes it goes to the consumer and
        the log, never to the host (in trio's system nursery it would crash the whole run,
        every task of the program; on asyncio the consumer would wait forever)."""
        try:
            await self.run()
        except BaseException as error:  # not even SystemExit may leave a host's task
            if _is_cancellation(error):
                raise
            logger.exception("aioloader: a stream's engine failed", exc_info=error)
            self.ring.fail_nowait(error)

    def _prepare(self) -> None:
        if self._ended is None:
            self._ended = anyio.Event()
            self._acquiring = anyio.Lock()
            self._scope = anyio.CancelScope()
            if self._cancelled:
                self._scope.cancel()
            self._loop_thread = threading.get_ident()
            self._call_soon = threadsafe_caller()

    async def run(self) -> None:
        """Fill the ring until the stop step, a failure or cancellation."""
        self._prepare()
        config = self.config
        ring = self.ring
        self.running = True
        self.counters.work_started(self)
        tuner = self.tuner
        if tuner is not None:
            tuner.begin(self._start)
            self._use_processes = tuner.knobs.processes > 0 and self._pool is not None
        assert self._scope is not None
        try:
            with self._scope:
                builders = config.prefetch if tuner is None else tuner.knobs.prefetch
                workers = config.workers if tuner is None else tuner.knobs.workers
                tuned = tuner is not None and tuner.bounds.workers > 0
                if tuned:  # threads that the tuner may take down to building inline
                    self._inline = workers == 0
                    workers = max(1, workers)
                starter = await self._set_up(workers)
                async with anyio.create_task_group() as behind:
                    await _serve_reads(config.dataset, behind)
                    try:
                        await self._build_all(starter, builders)
                    except Exception as error:  # handed on as itself, not in this group
                        self._engine_failed(error)
                    finally:
                        behind.cancel_scope.cancel()  # the steps are done: so are its reads
        except Exception as error:
            self._engine_failed(error)
        finally:
            self._builders = None
            if self._scope.cancel_called:
                ring.close_nowait()  # releases batches built but never taken
            if self._threads is not None:
                self._threads.close()
                self._threads = None
            if self._processes is not None:
                assert self._pool is not None
                await self._pool.release(self._processes)
                self._processes = None
            self._read = None
            self.running = False
            self.counters.work_ended(self)
            assert self._ended is not None
            self._ended.set()

    async def _build_all(self, starter: StepStarter | None, builders: int) -> None:
        """Build the steps until the stream's end: ``builders`` builders, or the feed."""
        async with anyio.create_task_group() as group:
            self._builders = group
            if starter is None:
                self._add_builders(builders)
            else:
                feed = StepFeed(self.ring, starter, self.counters, self.bound)
                group.start_soon(feed.run, self._load_kernels_beside)

    def _engine_failed(self, error: Exception) -> None:
        """A bug in the engine: hand it to the consumer."""
        logger.exception("aioloader: a stream's engine failed", exc_info=error)
        self.ring.fail_nowait(error)

    async def _set_up(self, workers: int) -> StepStarter | None:
        """Load the kernels, start the executors and the reader, let the source plan its
        reads; returns the feed's starter when every part of a step runs off the loop."""
        config = self.config
        if kernels.chosen() == "numba" and kernels.to_load():
            await anyio.to_thread.run_sync(kernels.load)  # before the first step
        if config.executor == "process":  # worker processes build whole steps
            assert self._pool is not None
            self._processes = await self._pool.acquire()
        # every part of a step off the loop: a take starts the next (engine/_feed.py)
        starter = None
        if self.tuner is None:
            starter = feed_starter(config, workers, self._processes)
        if starter is None and workers > 0 and config.executor == "thread":
            self._threads = BuildThreads(workers)
            ring = self.ring
            self._shared = SharedBuilds(
                config, self._threads, lambda: ring.next_to_take, self._start
            )
            if self._first_alone:
                self._first_built = anyio.Event()
        self._read = make_batch_reader(config.dataset, self.bound, self._threads, workers)
        plan_reads = getattr(config.dataset, "plan_reads", None)
        if callable(plan_reads):  # a source that reads by the plan: off the loop
            await anyio.to_thread.run_sync(
                plan_reads, config.sampler, config.seed, self._start, self._stop
            )
        return starter

    # -- building ---------------------------------------------------------------------------
    def _add_builders(self, count: int) -> None:
        """Run ``count`` builders in all: one per ring slot (a builder waiting for a free
        slot is woken by every change of the ring, so more than the slots would only spin),
        and never more than the stream has steps."""
        if self._stop is not None:
            count = max(1, min(count, self._stop - self._start))
        group = self._builders
        if group is None or self._cancelled:
            return
        while self._builder_count < count:
            self._builder_count += 1
            group.start_soon(self._builder)

    async def _builder(self) -> None:
        # The group outlives every step: reads that wait start their runners in it.
        async with anyio.create_task_group() as group:
            await self._build_steps(group)

    async def _build_steps(self, group: anyio.abc.TaskGroup) -> None:
        ring = self.ring
        while True:
            step = await ring.claim()
            if step is None:
                return
            try:
                batch = await self._build_step(step, group)
            except BaseException as error:  # SystemExit in a transform too: at its step
                if _is_cancellation(error):
                    ring.abandon_nowait()
                    raise
                logger.info("aioloader: global step %d failed: %r", step, error)
                ring.fill_nowait(step, None, error)
            else:
                ring.fill_nowait(step, batch)
            finally:
                if step == self._start and self._first_built is not None:
                    self._first_built.set()

    def _load_kernels_beside(self) -> None:
        """Load the compiled kernels in a worker thread once that compiles nothing."""
        if kernels.settled():
            return
        group = self._builders
        if group is not None and not self._loading_kernels and kernels.to_load():
            self._loading_kernels = True
            group.start_soon(anyio.to_thread.run_sync, kernels.load)

    async def _build_step(self, step: int, group: anyio.abc.TaskGroup) -> BatchT:
        """Build ``step`` where the executor in use when it starts says: a switch of
        ``workers="auto"`` applies from the next step to start, a step never moves.

        With auto, a step that fails in a process is built again on threads: when threads
        build it, the processes cannot (say, its samples do not pickle) and auto stays on
        threads; when threads fail too, the step's own error is delivered.
        """
        if self.tuner is None:
            return await self._build_on(step, group, self._processes)
        processes = await self._auto_processes(step)
        if processes is None:
            return await self._build_on(step, group, None)
        try:
            return await self._build_on(step, group, processes)
        except Exception as error:
            batch = await self._build_on(step, group, None)
            if isinstance(batch, Unbuilt):
                batch = self.build_now(batch)
            self._refuse_processes(step, error)
            return batch

    async def _auto_processes(self, step: int) -> ProcessBuilders | None:
        """``workers="auto"``: the worker processes while the tuner has chosen them (the
        first step that needs them starts them), else None."""
        if not self._use_processes:
            return None
        if self._processes is None:
            assert self._acquiring is not None
            assert self._pool is not None
            async with self._acquiring:
                if self._processes is None and self._use_processes:
                    try:
                        self._processes = await self._pool.acquire()
                    except Exception as error:  # the transform does not pickle, say
                        self._refuse_processes(step, error)
        return self._processes if self._use_processes else None

    def _refuse_processes(self, step: int, error: BaseException) -> None:
        self._use_processes = False
        assert self.tuner is not None
        self.tuner.refuse_processes(step, f"{type(error).__name__}: {error}")

    async def _build_on(
        self, step: int, group: anyio.abc.TaskGroup, processes: ProcessBuilders | None
    ) -> BatchT:
        config = self.config
        stats = self.counters
        self._load_kernels_beside()
        plan = await self._plan(step)
        clock = config.clock
        policy = config.on_error
        if processes is not None and processes.reads_in_workers and policy is None:
            # only the plan goes (with a bad-sample policy the parent reads, to repair)
            build_started = clock()
            self.bound.total += plan.size
            batch = await processes.build(plan, None)
            stats.build_seconds += clock() - build_started
            stats.batches_built += 1
            return batch  # type: ignore[no-any-return]
        first = self._first_built
        if first is not None and step != self._start:
            await first.wait()  # the first batch has the machine to itself
        read_started = clock()
        assert self._read is not None
        repairs = None if policy is None else StepRepairs(policy, plan, stats)
        if repairs is None:
            samples = await self._read(plan, group)
        else:
            samples = await self._read_repaired(plan, group, repairs)
        build_started = clock()
        stats.read_seconds += build_started - read_started
        inline = self._threads is None or self._inline
        if repairs is None and inline and processes is None:
            return Unbuilt(plan, samples)  # type: ignore[return-value]
        while True:
            try:
                batch = await self._build(plan, samples, processes)
            except Exception as error:
                slot = getattr(error, TRANSFORM_SLOT, None)
                if repairs is None or not isinstance(slot, int):
                    raise
                samples[slot] = await repairs.replace(slot, error, self._read_one)
            else:
                break
        stats.build_seconds += clock() - build_started
        stats.batches_built += 1
        return batch  # type: ignore[no-any-return]

    async def _build(
        self, plan: BatchPlan, samples: list[Any], processes: ProcessBuilders | None
    ) -> Any:
        config = self.config
        if processes is not None:
            return await processes.build(plan, samples)
        if self._threads is None or self._inline:  # with a bad-sample policy: on the loop
            return _never_loading(
                build_batch, plan, samples, config.transform, config.collator, config.takes_rng
            )
        assert self._shared is not None
        timer = None if self.tuner is None else self.tuner.meter.timed  # auto: every job timed
        return await self._shared.build(plan, samples, timer)

    async def _read_repaired(
        self, plan: BatchPlan, group: anyio.abc.TaskGroup, repairs: StepRepairs
    ) -> list[Any]:
        """The step's samples, each failed read replaced under the loader's ``on_error``.

        The batch is read as usual; only when that fails is each slot read on its own, so
        the slots that fail are known (a batch error that no single read repeats is raised).
        """
        assert self._read is not None
        try:
            return await self._read(plan, group)
        except Exception as error:
            batch_error = error
        samples = []
        for slot, index in enumerate(repairs.indices):
            try:
                sample = await self._read_one(index)
            except Exception as error:
                add_slot_note(error, plan, slot)
                sample = await repairs.replace(slot, error, self._read_one)
            samples.append(sample)
        if not repairs.failures:
            raise batch_error
        return samples

    async def _plan(self, step: int) -> BatchPlan:
        """A plan made off the loop, a run of steps per trip. Without build threads, only
        until the step's epoch has been planned once: that first plan may order a whole
        epoch (a ``BucketedSampler`` over 10^7 items takes ~1 s); the epoch's other steps
        cost microseconds, less than a trip, and are planned on the loop."""
        threads = self._threads
        if threads is not None:
            return await self._plans.get(step, threads.run)
        epoch = step // self._steps_per_epoch
        if epoch == self._epoch_planned and not self._plans.holds(step):
            try:
                return _never_loading(self.config.plan, step)
            except Exception as error:
                add_note(error, f"aioloader: while planning global step {step}")
                raise
        plan = await self._plans.get(step, _in_any_thread)
        self._epoch_planned = epoch
        return plan

    def build_now(self, unbuilt: Unbuilt) -> BatchT:
        """Build a step read ahead with ``workers=0``, in the consumer's task."""
        self._load_kernels_beside()
        return self.build_taken(unbuilt)

    def build_taken(self, unbuilt: Unbuilt) -> BatchT:
        """Build a step read ahead with ``workers=0`` on the thread that took it (the
        consumer's: the loop's, or the sync facade's); never loads the kernels there."""
        config = self.config
        started = config.clock()
        batch = _never_loading(
            build_batch,
            unbuilt.plan,
            unbuilt.samples,
            config.transform,
            config.collator,
            config.takes_rng,
        )
        self.counters.build_seconds += config.clock() - started
        self.counters.batches_built += 1
        return batch  # type: ignore[no-any-return]
