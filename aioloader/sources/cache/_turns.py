"""The cache's small pieces of concurrency: a sample on its way, turns of its own work that
yield to the event loop, failures noted instead of raised, and work sent to the loop."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import anyio

__all__ = ("YIELD_SECONDS", "Pending", "Turn", "noting", "on_the_loop")

YIELD_SECONDS = 0.002
"""Longest stretch of the cache's own work between two yields to the event loop."""


class Pending:
    """A sample on its way: waiters get its bytes, or None when its read failed."""

    __slots__ = ("_event", "by", "data", "done", "reserved", "run", "size", "waiters")

    def __init__(self, size: int) -> None:
        self._event: anyio.Event | None = None  # made for the first waiter only: cheap
        self.data: bytes | None = None
        self.done = False
        self.size = size
        self.waiters = 0
        self.reserved = False  # read ahead: its room is reserved in the memory tier
        self.by: Hashable = None  # the stream it is read ahead for
        self.run = -1  # the sample whose run it is read with (-1: none)

    async def wait(self) -> None:
        """Wait until the read ends (``data`` is then the bytes, or None if it failed)."""
        if not self.done:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()

    def finish(self) -> None:
        """The read ended: wake the waiters."""
        self.done = True
        if self._event is not None:
            self._event.set()


def on_the_loop(work: Callable[..., Any], *args: Any) -> Any:
    """``work(*args)`` on the event loop when called from one of its worker threads (the
    loader plans there, while other streams read), else here."""
    try:
        anyio.from_thread.run_sync(lambda: None)
    except RuntimeError:  # not a worker thread of a running loop
        return work(*args)
    return anyio.from_thread.run_sync(work, *args)


async def noting(
    failures: list[Exception], work: Callable[..., Awaitable[object]], *args: Any
) -> None:
    """Await ``work(*args)``; an ``Exception`` it raises is noted in ``failures`` instead
    of raised, so that no task group wraps it."""
    try:
        await work(*args)
    except Exception as error:
        failures.append(error)


class Turn:
    """Yields to the event loop once ``YIELD_SECONDS`` have passed since the last yield."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since = time.perf_counter()

    async def pause_if_due(self) -> bool:
        """Yield if due; True when it did (the world may have changed meanwhile)."""
        if time.perf_counter() - self._since < YIELD_SECONDS:
            return False
        await anyio.lowlevel.checkpoint()
        self._since = time.perf_counter()
        return True
