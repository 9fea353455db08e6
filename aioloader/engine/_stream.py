"""A stream of batches for global steps ``[start, stop)``: the ring and the tasks that fill it.

Preferred use is structured: ``async with loader.stream() as batches: async for ...``; the
task group then lives in the consumer's task. A bare ``async for`` hosts the same task group
in a background task of the running event loop, cancelled when the stream ends, is closed
with ``aclose()``, or is garbage-collected.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import anyio
import anyio.abc
import sniffio

from .._compat import add_note
from ..core._plan import BatchPlan, plan_batch
from ._build import build_batch
from ._processes import ProcessBuilders
from ._ring import PrefetchRing

if TYPE_CHECKING:
    from ._loader import DataLoader

BatchT = TypeVar("BatchT")
ResultT = TypeVar("ResultT")


def _threadsafe_caller() -> Callable[[Callable[[], object]], object]:
    """``call(fn)`` from any thread runs ``fn`` soon on the current event loop's thread."""
    if sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon
    import asyncio

    return asyncio.get_running_loop().call_soon_threadsafe


class BuildThreads:
    """The stream's CPU threads: build jobs run back to back, each result wakes the loop.

    Jobs queue in the executor, so a thread starts the next job as soon as it finishes one,
    without a round trip through the event loop (as a ``CapacityLimiter`` would need).
    A job that started always finishes: a cancelled caller still waits for it (shielded),
    hands its result to ``discard`` (say, to release a pooled batch), then re-raises.
    """

    __slots__ = ("_call_soon", "_executor")

    def __init__(self, workers: int) -> None:
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="aioloader-build")
        self._call_soon = _threadsafe_caller()

    async def run(
        self,
        function: Callable[..., ResultT],
        *args: Any,
        discard: Callable[[ResultT], object] | None = None,
    ) -> ResultT:
        """``function(*args)`` in a thread; the calling task waits without blocking the loop."""
        done = anyio.Event()
        call_soon = self._call_soon

        def wake(_: Future[ResultT]) -> None:
            call_soon(done.set)

        future = self._executor.submit(function, *args)
        future.add_done_callback(wake)
        try:
            await done.wait()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await done.wait()
            if discard is not None and future.exception() is None:
                discard(future.result())
            raise
        return future.result()

    def close(self) -> None:
        """Let the threads exit (every job has been awaited) and join them."""
        self._executor.shutdown(wait=True)


class _Unbuilt:
    """workers=0: a step planned and read ahead, built when the consumer takes it.

    Reads still run ``prefetch`` steps ahead; collation waits for the consumer, so at most
    the batch in hand and the one being built hold pooled buffers, which stay in cache.
    """

    __slots__ = ("plan", "samples")

    def __init__(self, plan: BatchPlan, samples: list[Any]) -> None:
        self.plan = plan
        self.samples = samples


def release_batch(batch: Any) -> None:
    """Return a batch's pooled buffers if it has any (``batch.release()``)."""
    release = getattr(batch, "release", None)
    if callable(release):
        release()


class BatchStream(Generic[BatchT]):
    """Async iterator (and async context manager) over the batches of ``[start, stop)``."""

    def __init__(self, loader: DataLoader[Any, BatchT], start: int, stop: int | None) -> None:
        self._loader = loader
        self._start = start
        self._stop = stop
        self._ring: PrefetchRing[BatchT] = PrefetchRing(loader.prefetch, start, stop, release_batch)
        self._group: anyio.abc.TaskGroup | None = None
        self._scope: anyio.CancelScope | None = None
        self._host_done: anyio.Event | None = None
        self._cancel_host: Callable[[], None] | None = None
        self._cancel_host_soon: Callable[[], object] | None = None
        self._started = False
        self._finished = False
        self._threads: BuildThreads | None = None
        self._processes: ProcessBuilders | None = None

    @property
    def ring(self) -> PrefetchRing[BatchT]:
        """The prefetch ring (for statistics)."""
        return self._ring

    # -- structured use ---------------------------------------------------------------
    async def __aenter__(self) -> BatchStream[BatchT]:
        if self._started:
            raise RuntimeError("a batch stream can be entered once, before it is iterated")
        self._started = True
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._fill)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._group is not None
        self._finish()
        self._group.cancel_scope.cancel()
        try:
            # The group holds only background work, whose failures reach the consumer
            # through the ring; the consumer's own exception propagates unchanged.
            await self._group.__aexit__(None, None, None)
        finally:
            self._ring.close_nowait()
        return None

    # -- iteration --------------------------------------------------------------------
    def __aiter__(self) -> BatchStream[BatchT]:
        return self

    async def __anext__(self) -> BatchT:
        if not self._started:
            self._started = True
            self._spawn_host()
        if self._finished:
            raise StopAsyncIteration
        stats = self._loader._stats
        ring = self._ring
        started = time.perf_counter()
        try:
            batch = await ring.take()
            if isinstance(batch, _Unbuilt):
                batch = self._build_now(batch)
        except StopAsyncIteration:
            self._finish()
            raise
        except BaseException:
            self._finish()
            raise
        finally:
            stats.consumer_wait_seconds += time.perf_counter() - started
        stats.batches_delivered += 1
        self._loader._cursor = ring.next_to_take
        return batch

    def _build_now(self, unbuilt: _Unbuilt) -> BatchT:
        loader = self._loader
        started = time.perf_counter()
        batch = build_batch(unbuilt.plan, unbuilt.samples, loader.transform, loader.collator)
        loader._stats.build_seconds += time.perf_counter() - started
        loader._stats.batches_built += 1
        return batch  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        """Stop the stream, cancel its work and wait until every task has ended."""
        self._finish()
        if self._host_done is not None:
            await self._host_done.wait()

    def _finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        self._ring.close_nowait()
        if self._cancel_host is not None:
            self._cancel_host()

    def __del__(self) -> None:
        # Dropped mid-iteration (``break`` out of a bare ``async for``): cancel the host
        # task from the event loop, whichever thread the garbage collector runs on.
        if self._started and not self._finished and self._cancel_host_soon is not None:
            self._finished = True
            with contextlib.suppress(Exception):  # the loop may already be closed
                self._cancel_host_soon()

    # -- hosting for a bare ``async for`` --------------------------------------------------
    def _spawn_host(self) -> None:
        self._host_done = anyio.Event()
        scope = anyio.CancelScope()
        self._scope = scope
        ring, done = self._ring, self._host_done
        fill = self._fill

        async def host() -> None:
            try:
                with scope:
                    await fill()
            finally:
                if scope.cancel_called:
                    ring.close_nowait()  # releases batches built but never taken
                done.set()

        self._cancel_host = scope.cancel
        library = sniffio.current_async_library()
        if library == "trio":
            import trio

            token = trio.lowlevel.current_trio_token()
            trio.lowlevel.spawn_system_task(host, name="aioloader-stream")
            self._cancel_host_soon = functools.partial(token.run_sync_soon, scope.cancel)
        else:
            import asyncio

            loop = asyncio.get_running_loop()
            task = loop.create_task(host(), name="aioloader-stream")
            self._keep_alive = task
            self._cancel_host_soon = functools.partial(loop.call_soon_threadsafe, scope.cancel)

    # -- the work ---------------------------------------------------------------------
    async def _fill(self) -> None:
        ring = self._ring
        builders = self._loader.prefetch
        if self._stop is not None:
            builders = max(1, min(builders, self._stop - self._start))
        loader = self._loader
        if self._loader.workers > 0 and loader.executor == "thread":
            self._threads = BuildThreads(self._loader.workers)
        try:
            if loader.executor == "process":  # issue 14: worker processes build whole steps
                self._processes = ProcessBuilders(loader.workers, loader.transform, loader.collator)
            async with anyio.create_task_group() as group:
                for _ in range(builders):
                    group.start_soon(self._builder)
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as error:  # a bug in the engine: hand it to the consumer
            ring.fail_nowait(error)
        finally:
            if self._threads is not None:
                self._threads.close()
                self._threads = None  # the stream may outlive its work (statistics())
            if self._processes is not None:
                self._processes.close()
                self._processes = None

    async def _builder(self) -> None:
        ring = self._ring
        while True:
            step = await ring.claim()
            if step is None:
                return
            try:
                batch = await self._build_step(step)
            except anyio.get_cancelled_exc_class():
                ring.abandon_nowait()
                raise
            except Exception as error:
                ring.fill_nowait(step, None, error)
            else:
                ring.fill_nowait(step, batch)

    async def _build_step(self, step: int) -> BatchT:
        loader = self._loader
        stats = loader._stats
        plan = await self._plan(step)
        read_started = time.perf_counter()
        samples = await loader._read(plan)
        build_started = time.perf_counter()
        stats.read_seconds += build_started - read_started
        threads = self._threads
        if self._processes is not None:
            batch = await self._processes.build(plan, samples)
        elif threads is None:
            return cast(BatchT, _Unbuilt(plan, samples))
        else:
            batch = await threads.run(
                build_batch,
                plan,
                samples,
                loader.transform,
                loader.collator,
                discard=release_batch,
            )
        stats.build_seconds += time.perf_counter() - build_started
        stats.batches_built += 1
        return batch  # type: ignore[no-any-return]

    async def _plan(self, step: int) -> BatchPlan:
        loader = self._loader
        try:
            threads = self._threads
            if threads is not None:
                return await threads.run(plan_batch, loader.sampler, loader.seed, step)
            return plan_batch(loader.sampler, loader.seed, step)
        except Exception as error:
            add_note(error, f"aioloader: while planning global step {step}")
            raise
