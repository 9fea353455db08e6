"""``DeviceStream``: batches from ``for`` or ``async for``, handed over on a device."""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import anyio.to_thread

from ..core import as_int
from ._device import DeviceBackend, DeviceFeed, DeviceStatistics


class DeviceStream:
    """Batches of ``batches`` with every numpy array copied to a device, as fresh arrays.

    Iterate it with ``for`` when ``batches`` is an iterable (``loader.iter_sync()``, a
    ``DataLoader``, a list) and with ``async for`` when it is an async iterable (a
    ``DataLoader`` or its ``stream()``). Up to ``depth`` batches are in flight: staged into
    pooled page-locked buffers (or read in place from registered shared memory) and copied
    on the device's side stream while the consumer computes on earlier ones. A batch is
    handed over once its copy has completed; its host batch has been released by then.
    The arrays handed over are new allocations: keep them as long as you like.

    The framework modules build it: ``aioloader.interop.torch.to_device_stream`` and
    ``aioloader.interop.jax.to_device_stream``; ``FakeDevice`` stands in for a device in
    tests. ``close()`` (or leaving ``with``) waits for the copies in flight, frees the
    staging buffers and unregisters host memory; garbage collection does the same.

    Args:
        batches: an iterable or async iterable of batches (numpy arrays nested as
            ``to_torch`` allows; pooled aioloader batches are released once copied).
        backend: the device.
        depth: batches in flight at most (>= 1; 2 overlaps one copy with one step).
    """

    def __init__(self, batches: Any, backend: DeviceBackend, *, depth: int = 2) -> None:
        depth = as_int("depth", depth)
        if depth < 1:
            raise ValueError(f"depth must be an integer >= 1 but got {depth}")
        if not hasattr(batches, "__iter__") and not hasattr(batches, "__aiter__"):
            raise TypeError(
                f"batches must be an iterable or an async iterable of batches but got "
                f"{type(batches).__name__}"
            )
        self._batches = batches
        self._feed = DeviceFeed(backend, depth)
        self._active = False
        self._serving: weakref.ref[_AsyncServe] | None = None
        self._finalizer = weakref.finalize(self, self._feed.close)
        self._finalizer.atexit = False

    @property
    def backend(self) -> DeviceBackend:
        """The device the batches go to."""
        return self._feed.backend

    def statistics(self) -> DeviceStatistics:
        """Counters of the feed: batches, waits, copies, staging and registrations."""
        return self._feed.statistics()

    def _start(self, form: str) -> None:
        if not self._finalizer.alive:
            raise RuntimeError("this DeviceStream is closed; build a new one")
        if self._active and (self._serving is None or self._serving() is not None):
            raise RuntimeError(
                f"a DeviceStream serves one iteration at a time but `{form}` started a "
                "second one while the first is running"
            )
        self._serving = None  # an `async for` left by break: its iterator is gone
        self._active = True
        self._feed.drain()  # what such an iteration left in flight

    def __iter__(self) -> Iterator[Any]:
        if not hasattr(self._batches, "__iter__"):
            raise TypeError(
                "batches must be an iterable for `for` but got "
                f"{type(self._batches).__name__}; use `async for`"
            )
        self._start("for")
        return self._serve()

    def _serve(self) -> Iterator[Any]:
        feed, source = self._feed, iter(self._batches)
        exhausted = False
        try:
            while True:
                while not exhausted and feed.pending < feed.depth:
                    try:
                        batch = next(source)
                    except StopIteration:
                        exhausted = True
                    else:
                        feed.submit(batch)
                if not feed.pending:
                    return
                yield feed.take()
        finally:
            self._active = False
            feed.drain()
            close = getattr(source, "close", None)
            if callable(close):
                close()

    def __aiter__(self) -> AsyncIterator[Any]:
        if not hasattr(self._batches, "__aiter__"):
            raise TypeError(
                "batches must be an async iterable for `async for` but got "
                f"{type(self._batches).__name__}; use `for`"
            )
        self._start("async for")
        serve = _AsyncServe(self._feed, self._batches.__aiter__(), self._stopped)
        self._serving = weakref.ref(serve)
        return serve

    def _stopped(self) -> None:
        self._active = False
        self._serving = None

    def close(self) -> None:
        """Wait for the copies in flight, free staging and unregister memory; idempotent."""
        self._finalizer()

    def __enter__(self) -> DeviceStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> DeviceStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.close)

    def __repr__(self) -> str:
        return f"DeviceStream({self._feed.backend.name!r}, depth={self._feed.depth})"


class _AsyncServe:
    """One ``async for`` over a ``DeviceStream``: staging and waits run in a worker thread."""

    def __init__(
        self, feed: DeviceFeed, source: AsyncIterator[Any], on_stop: Callable[[], None]
    ) -> None:
        self._feed, self._source, self._on_stop = feed, source, on_stop
        self._exhausted = self.done = False

    def __aiter__(self) -> _AsyncServe:
        return self

    async def __anext__(self) -> Any:
        feed = self._feed
        if self.done:
            raise StopAsyncIteration
        try:
            while not self._exhausted and feed.pending < feed.depth:
                try:
                    batch = await self._source.__anext__()
                except StopAsyncIteration:
                    self._exhausted = True
                else:
                    await anyio.to_thread.run_sync(feed.submit, batch)
            if not feed.pending:
                raise StopAsyncIteration  # noqa: TRY301 - the end, with the cleanup below
            if not feed.oldest_ready():
                await anyio.to_thread.run_sync(feed.wait_oldest)
            return feed.take()
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """End the iteration: wait for the copies in flight and close the source."""
        if self.done:
            return
        self.done = True
        self._on_stop()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._feed.drain)
            aclose = getattr(self._source, "aclose", None)
            if callable(aclose):
                await aclose()


__all__ = ("DeviceStream",)
