"""``for batch in loader``: the async stream driven from synchronous code via a portal."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol, TypeVar

from anyio.from_thread import start_blocking_portal

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

    Leaving the loop early (``break``, an exception, garbage collection) closes the stream
    and its thread.
    """
    options = dict(default_backend_options(backend) if backend_options is None else backend_options)
    with start_blocking_portal(backend, options) as portal:
        stream = loader.stream(start, stop)
        with portal.wrap_async_context_manager(stream):
            while True:
                try:
                    batch = portal.call(stream.__anext__)
                except StopAsyncIteration:
                    return
                yield batch
