"""``for batch in loader``: the async stream run in a loop thread, handed off to sync code."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

import anyio
from anyio.from_thread import start_blocking_portal

from .._errors import LoaderClosedError
from .._event_loops import default_backend_options, threadsafe_caller
from ..core import release_batch
from ._handoff import BatchHandOff, HandOffClosed
from ._stream import BatchStream
from ._work import Unbuilt

BatchT = TypeVar("BatchT")
BACKENDS = ("asyncio", "trio")
"""The event loops the sync facade runs its stream on."""


class Streams(Protocol[BatchT]):
    """What opens a stream of batches (a ``DataLoader``)."""

    def stream(self, start: int | None = None, stop: int | None = None) -> BatchStream[BatchT]:
        """The batches of global steps ``[start, stop)``."""


def check_backend(backend: object) -> str:
    """``backend`` itself, when it is one of ``BACKENDS``.

    Raises:
        ValueError: any other value.
    """
    if not isinstance(backend, str) or backend not in BACKENDS:
        allowed = " or ".join(repr(name) for name in BACKENDS)
        raise ValueError(f"backend must be {allowed} but got {backend!r}")
    return backend


def iterate_blocking(
    loader: Streams[BatchT],
    start: int | None,
    stop: int | Callable[[], int] | None,
    backend: str = "asyncio",
    backend_options: Mapping[str, Any] | None = None,
) -> Iterator[BatchT]:
    """Yield the batches of ``loader.stream(start, stop)``; the event loop runs in a thread.

    ``stop`` may be a function, called when the first batch is asked for (the end of the
    cursor's epoch, which a ``load_state_dict`` may move until then). The loop's thread
    pushes finished batches into a hand-off and this thread takes them: no round trip per
    batch. The ring counts the batches handed off as its own until they are taken here, so
    ``prefetch`` bounds what is prepared ahead of the batch in hand. Batches come in step
    order, an error is raised at its step (any exception, ``SystemExit`` and
    ``KeyboardInterrupt`` included: the same object), and a cursor-driven stream moves the
    cursor and the loader's delivery counts as each batch is yielded here. Leaving the loop
    early (``break``, an exception, garbage collection) releases the batches handed off
    but not taken, closes the stream and ends its thread.
    """
    options = dict(default_backend_options(backend) if backend_options is None else backend_options)
    with start_blocking_portal(backend, options) as portal:
        stream = loader.stream(start, stop() if callable(stop) else stop)
        stream.defer_delivery()  # counted here, as each batch reaches the consumer
        # workers=0 builds each step on this thread, as the loop in hand would: the loop's
        # thread only reads ahead, and a batch is made where it is used
        stream.defer_builds()
        call_soon = portal.call(threadsafe_caller)
        hand_off: BatchHandOff[tuple[int, BatchT]] = BatchHandOff(
            stream.ring.statistics().capacity, call_soon, _release_handed
        )
        stream.ring.lend(hand_off)
        pumping = portal.start_task_soon(_pump, stream, hand_off)
        # Whatever ends the pump (an error it could not hand over, a cancellation, the
        # portal's loop stopping) ends the hand-off, so the consumer never waits forever.
        pumping.add_done_callback(lambda done: hand_off.finish(_pump_ended(done)))
        clock = stream.clock
        try:
            while True:
                started = clock()
                try:
                    next_step, batch = hand_off.take()
                except StopIteration:
                    return
                if isinstance(batch, Unbuilt):
                    batch = stream.build(batch)
                stream.received(next_step, clock() - started)
                yield batch
        finally:
            hand_off.close()
            pumping.cancel()


def _release_handed(item: tuple[int, Any]) -> None:
    release_batch(item[1])


def _pump_ended(done: Future[None]) -> BaseException:
    """The error a consumer sees when the pump ended without ending the hand-off."""
    error = LoaderClosedError("the sync loader's event loop thread stopped serving batches")
    cause = None if done.cancelled() else done.exception()
    error.__cause__ = cause
    return error


async def _pump(stream: BatchStream[BatchT], hand_off: BatchHandOff[tuple[int, BatchT]]) -> None:
    """Move the stream's batches into the hand-off until its end, an error or a ``close``.

    Any error, ``BaseException`` included, goes to the consumer, who raises it; only a
    cancellation (the consumer has left) propagates here.
    """
    try:
        async with stream:
            async for batch in stream:
                await hand_off.put((stream.ring.next_to_take, batch))
    except HandOffClosed:
        return
    except anyio.get_cancelled_exc_class():
        raise
    except BaseException as error:  # SystemExit too: the consumer raises it
        hand_off.finish(error)
        return
    hand_off.finish()
