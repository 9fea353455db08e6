"""The consumer's handle on a stream of batches for global steps ``[start, stop)``.

Preferred use is structured: ``async with loader.stream() as batches: async for ...``; the
work then lives in a task group of the consumer's task. A bare ``async for`` hosts the same
work in a background task of the running event loop. Either way the handle owns nothing
that keeps the work alive: leaving the loop early (``break``, an exception, ``return``,
garbage collection) cancels the work, releases every batch built ahead and ends its threads.

Lifecycle (``BatchStream.state``)::

    not started --first __anext__ / __aenter__--> running --end of range--> finished
                                                    |  \\--error delivered--> failed
                                                    \\--aclose()----------> closed

``StopAsyncIteration`` only at the end of the range; after a failure or ``aclose()`` every
``__anext__`` raises ``LoaderClosedError`` saying which. A cancelled ``__anext__`` leaves the
stream running: the next call returns that same step.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Generic, TypeVar

import anyio
import anyio.abc

from .._compat import BaseExceptionGroup
from .._errors import LoaderClosedError
from ._config import ResumeCursor
from ._ring import PrefetchRing
from ._work import StreamWork, Unbuilt

BatchT = TypeVar("BatchT")


class StreamState(enum.Enum):
    """Where a ``BatchStream`` is in its life."""

    NOT_STARTED = "not started"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CLOSED = "closed"


def _sole_error(error: BaseException) -> BaseException:
    """The one exception inside nested groups of one each, or ``error`` itself."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


class BatchStream(Generic[BatchT]):
    """Async iterator (and async context manager) over the batches of ``[start, stop)``.

    Made by ``DataLoader.stream()`` and ``async for batch in loader`` around the stream's
    ``work``. Given the loader's ``cursor`` (the stream started at it), each delivered batch
    advances it; an explicit range gets none and moves nothing.
    """

    def __init__(self, work: StreamWork[BatchT], cursor: ResumeCursor | None) -> None:
        self._work = work
        self._state = StreamState.NOT_STARTED
        self._cursor = cursor
        self._deferred = False  # the consumer counts deliveries itself (``received``)
        self._builds_deferred = False  # steps read ahead are delivered unbuilt (``build``)
        self._failure: str | None = None
        self._group: anyio.abc.TaskGroup | None = None

    @property
    def state(self) -> StreamState:
        """Where the stream is in its life."""
        return self._state

    @property
    def moves_cursor(self) -> bool:
        """Whether delivered batches advance the loader's resume cursor."""
        return self._cursor is not None

    def defer_delivery(self) -> None:
        """Leave the counts of delivery (and the cursor) to ``received``: for a consumer that
        takes these batches later, from a hand-off in another thread."""
        self._deferred = True

    def defer_builds(self) -> bool:
        """Deliver the steps that ``workers=0`` builds when taken as they are (``Unbuilt``),
        for a consumer that builds them on its own thread with ``build``; whether it will
        (not under ``workers="auto"``, whose tuner times the builds it sees)."""
        self._builds_deferred = self._work.tuner is None
        return self._builds_deferred

    def build(self, unbuilt: Unbuilt) -> BatchT:
        """Build a step delivered unbuilt, on the calling thread (raises the step's error)."""
        return self._work.build_taken(unbuilt)

    @property
    def clock(self) -> Callable[[], float]:
        """The loader's clock (seconds), which times the consumer's waits."""
        return self._work.config.clock

    def received(self, next_step: int, waited: float) -> None:
        """A batch of a deferred stream reached its consumer after ``waited`` seconds; the
        step after it is ``next_step``."""
        counters = self._work.counters
        counters.batches_delivered += 1
        counters.consumer_wait_seconds += waited
        if self._cursor is not None:
            self._cursor.step = next_step

    @property
    def ring(self) -> PrefetchRing[BatchT]:
        """The prefetch ring (for statistics)."""
        return self._work.ring

    # -- structured use ---------------------------------------------------------------
    async def __aenter__(self) -> BatchStream[BatchT]:
        if self._state is not StreamState.NOT_STARTED:
            raise RuntimeError(
                f"a batch stream can be entered once, before it is iterated, but it is "
                f"{self._state.value}"
            )
        self._state = StreamState.RUNNING
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._work.run)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._group is not None
        if self._state is StreamState.RUNNING:
            self._state = StreamState.CLOSED
        self._work.cancel()
        # The group holds only background work, whose failures reach the consumer through
        # the ring; the consumer's own exception propagates unchanged. What escapes the work
        # is a BaseException of the user's code (SystemExit in a transform run by a build
        # thread): it propagates as itself, not wrapped in the groups it crossed.
        sole: BaseException | None = None
        try:
            await self._group.__aexit__(None, None, None)
        except BaseExceptionGroup as group:
            sole = _sole_error(group)
            if sole is group:
                raise
        if sole is not None:
            raise sole

    # -- iteration --------------------------------------------------------------------
    def __aiter__(self) -> BatchStream[BatchT]:
        return self

    async def __anext__(self) -> BatchT:
        state = self._state
        if state is not StreamState.RUNNING:
            if state is StreamState.NOT_STARTED:
                self._state = StreamState.RUNNING
                self._work.spawn()
            elif state is StreamState.FINISHED:
                raise StopAsyncIteration
            elif state is StreamState.FAILED:
                raise LoaderClosedError(
                    f"this batch stream failed ({self._failure}) and delivers nothing more; "
                    "resume from loader.state_dict() with a new stream"
                )
            else:
                raise LoaderClosedError("this batch stream was closed with aclose()")
        work = self._work
        stats = work.counters
        clock = work.config.clock
        started = clock()
        try:
            batch = await work.ring.take()
            if isinstance(batch, Unbuilt) and not self._builds_deferred:
                batch = work.build_now(batch)
        except StopAsyncIteration:
            self._state = StreamState.FINISHED
            work.cancel()
            raise
        except anyio.get_cancelled_exc_class():
            raise  # the stream stays usable: the next call returns this same step
        except BaseException as error:  # SystemExit from a transform ends the stream too
            self._state = StreamState.FAILED
            self._failure = f"{type(error).__name__} at global step {work.ring.next_to_take - 1}"
            work.cancel()
            raise
        finally:
            if not self._deferred:
                stats.consumer_wait_seconds += clock() - started
        next_step = work.ring.next_to_take
        if not self._deferred:
            stats.batches_delivered += 1
            if self._cursor is not None:
                self._cursor.step = next_step
        if work.tuner is not None:
            work.tuner.delivered(next_step, work)
        return batch

    async def aclose(self) -> None:
        """Stop the stream, cancel its work and wait until every task and thread has ended."""
        if self._state in (StreamState.NOT_STARTED, StreamState.RUNNING):
            self._state = StreamState.CLOSED
        self._work.cancel()
        if self._group is None:
            await self._work.wait_ended()

    def __del__(self) -> None:
        # Dropped mid-iteration (``break`` out of a bare ``async for``): cancel the work
        # (posted to its event loop when the garbage collector runs on another thread).
        work = getattr(self, "_work", None)
        if work is not None and getattr(self, "_state", None) is StreamState.RUNNING:
            work.cancel(from_finalizer=True)
