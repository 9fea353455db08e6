"""The build threads of one stream: CPU jobs taken soonest step first."""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import anyio

from .._event_loops import threadsafe_caller

ResultT = TypeVar("ResultT")

_Job = tuple[tuple[int, ...], Future[Any], Callable[..., Any], tuple[Any, ...]]


class BuildThreads:
    """The stream's CPU threads: build jobs run back to back, each result wakes the loop.

    Jobs queue in the executor, so a thread starts the next job as soon as it finishes one,
    without a round trip through the event loop (as a ``CapacityLimiter`` would need). A thread
    takes the queued job of the lowest ``priority`` (a global step: the consumer waits for
    the soonest step, so a later step never delays it), jobs without one first (planning,
    which every step waits for), and equals in the order they came. A cancelled caller
    whose job has not started takes it off the queue and re-raises at once. A job that
    started always finishes: its cancelled caller waits for it (shielded), hands its result
    to ``discard`` (say, to release a pooled batch), then re-raises.
    """

    __slots__ = (
        "_call_soon",
        "_executor",
        "_jobs",
        "_lock",
        "_order",
        "_retired",
        "_running",
        "workers",
    )

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="aioloader-build")
        self._retired: list[ThreadPoolExecutor] = []
        self._lock = threading.Lock()
        self._jobs: list[_Job] = []  # a heap: each ``_take`` the executor runs takes one
        self._order = itertools.count()
        self._running = 0
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

    def spare(self) -> int:
        """How many more jobs would start at once: threads neither busy nor spoken for."""
        with self._lock:
            return max(0, self.workers - self._running - len(self._jobs))

    async def run(
        self,
        function: Callable[..., ResultT],
        *args: Any,
        discard: Callable[[ResultT], object] | None = None,
        priority: int | None = None,
    ) -> ResultT:
        """``function(*args)`` in a thread; the calling task waits without blocking the loop."""
        done = anyio.Event()
        call_soon = self._call_soon

        def wake(_: Future[ResultT]) -> None:
            call_soon(done.set)

        future: Future[ResultT] = Future()
        future.add_done_callback(wake)
        key = (0, next(self._order)) if priority is None else (1, priority, next(self._order))
        with self._lock:
            heapq.heappush(self._jobs, (key, future, function, args))
        self._executor.submit(self._take)
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

    def _take(self) -> None:
        """Run the soonest job queued that its caller still wants (one ``_take`` is
        submitted per job, so none is left behind; a job given up leaves a ``_take`` that
        runs another, or none)."""
        with self._lock:
            while self._jobs:
                _, future, function, args = heapq.heappop(self._jobs)
                if future.set_running_or_notify_cancel():
                    self._running += 1
                    break
            else:
                return
        try:
            future.set_result(function(*args))
        except BaseException as error:  # handed to the caller, as an executor does
            future.set_exception(error)
        finally:
            with self._lock:
                self._running -= 1

    def close(self) -> None:
        """Let the threads exit (every job has been awaited or cancelled) and join them."""
        with self._lock:
            for _, future, _, _ in self._jobs:
                future.cancel()
            self._jobs.clear()
        for executor in (*self._retired, self._executor):
            executor.shutdown(wait=True, cancel_futures=True)
