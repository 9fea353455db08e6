"""The build threads of one stream."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import anyio

from .._event_loops import threadsafe_caller

ResultT = TypeVar("ResultT")


class BuildThreads:
    """The stream's CPU threads: build jobs run back to back, each result wakes the loop.

    Jobs queue in the executor, so a thread starts the next job as soon as it finishes one,
    without a round trip through the event loop (as a ``CapacityLimiter`` would need).
    A cancelled caller whose job has not started takes it off the queue and re-raises at
    once. A job that started always finishes: its cancelled caller waits for it (shielded),
    hands its result to ``discard`` (say, to release a pooled batch), then re-raises.
    """

    __slots__ = ("_call_soon", "_executor", "_retired", "workers")

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="aioloader-build")
        self._retired: list[ThreadPoolExecutor] = []
        self._call_soon = threadsafe_caller()

    def resize(self, workers: int) -> None:
        """Run later jobs on ``workers`` threads; jobs already queued finish where they are."""
        if workers == self.workers:
            return
        self.workers = workers
        old = self._executor
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="aioloader-build")
        old.shutdown(wait=False)
        self._retired.append(old)

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
            if future.cancel():  # still queued: it never runs
                raise
            with anyio.CancelScope(shield=True):
                await done.wait()
            if discard is not None and future.exception() is None:
                discard(future.result())
            raise
        return future.result()

    def close(self) -> None:
        """Let the threads exit (every job has been awaited or cancelled) and join them."""
        for executor in (*self._retired, self._executor):
            executor.shutdown(wait=True, cancel_futures=True)
