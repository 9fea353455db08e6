"""``for batch in loader``: the async stream run in a loop thread, handed off to sync code."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol, TypeVar

from anyio.from_thread import start_blocking_portal

from .._threadsafe import threadsafe_caller
from ..core._pool import release_batch
from ._handoff import BatchHandOff, HandOffClosed
from ._stream import BatchStream

BatchT = TypeVar("BatchT")


class Streams(Protocol[BatchT]):
    """What opens a stream of batches (a ``DataLoader``)."""

    def stream(self, start: int | None = None, stop: int | None = None) -> BatchStream[BatchT]:
        """The batches of global steps ``[start, stop)``."""


def default_backend_options(backend: str) -> dict[str, Any]:
    """uvloop for asyncio where it is installed, nothing otherwise."""
    if backend != "asyncio":
        return {}
    try:
        import uvloop  # noqa: F401
    except ImportError:  # pragma: no cover - uvloop is installed where the platform has it
        return {}
    return {"use_uvloop": True}


def iterate_blocking(
    loader: Streams[BatchT],
    start: int | None,
    stop: int | None,
    backend: str = "asyncio",
    backend_options: Mapping[str, Any] | None = None,
) -> Iterator[BatchT]:
    """Yield the batches of ``loader.stream(start, stop)``; the event loop runs in a thread.

    The loop's thread pushes finished batches into a hand-off of ``loader.prefetch`` slots
    and this thread takes them: no round trip per batch. Batches come in step order, an
    error is raised at its step, and a cursor-driven stream moves the cursor as each batch
    is yielded here. Leaving the loop early (``break``, an exception, garbage collection)
    releases the batches handed off but not taken, closes the stream and ends its thread.
    """
    options = dict(default_backend_options(backend) if backend_options is None else backend_options)
    with start_blocking_portal(backend, options) as portal:
        stream = loader.stream(start, stop)
        if stream.moves_cursor:
            stream.defer_cursor()  # moved here, as each batch reaches the consumer
        call_soon = portal.call(threadsafe_caller)
        hand_off: BatchHandOff[tuple[int, BatchT]] = BatchHandOff(
            stream.ring.statistics().capacity, call_soon, _release_handed
        )
        pumping = portal.start_task_soon(_pump, stream, hand_off)
        try:
            while True:
                try:
                    next_step, batch = hand_off.take()
                except StopIteration:
                    return
                if stream.moves_cursor:
                    stream.move_cursor(next_step)
                yield batch
        finally:
            hand_off.close()
            pumping.cancel()


def _release_handed(item: tuple[int, Any]) -> None:
    release_batch(item[1])


async def _pump(stream: BatchStream[BatchT], hand_off: BatchHandOff[tuple[int, BatchT]]) -> None:
    """Move the stream's batches into the hand-off until its end, an error or a ``close``."""
    try:
        async with stream:
            async for batch in stream:
                await hand_off.put((stream.ring.next_to_take, batch))
    except HandOffClosed:
        return
    except Exception as error:
        hand_off.finish(error)
        return
    hand_off.finish()
