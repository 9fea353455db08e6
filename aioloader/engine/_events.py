"""One-shot wake-ups between the tasks of one event loop, cheaper than ``anyio.Event``.

An ``anyio.Event`` asks sniffio for the running library each time one is made and wraps the
library's own event: about a dozen Python calls from creation to wake-up. The engine's hot
waits (a ring's consumer and builders, once or twice per step) make one per wait, so they
take the loop's own ``asyncio.Event`` or ``trio.Event`` class once and make those: a few
calls. Cancellation is the library's own (anyio cancels a task waiting on either).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import sniffio


class LoopEvent(Protocol):
    """What ``asyncio.Event`` and ``trio.Event`` share."""

    def set(self) -> None:
        """Wake every task waiting (a task that waits later returns at once)."""

    def is_set(self) -> bool:
        """Whether ``set`` was called."""

    async def wait(self) -> object:
        """Wait until ``set`` is called."""


def loop_event_type() -> Callable[[], LoopEvent]:
    """The running event loop's own event class (asyncio's, or trio's under trio)."""
    if sniffio.current_async_library() == "trio":
        import trio

        return trio.Event
    import asyncio

    return asyncio.Event
