"""The reorder window: the ordered map (``aioloader._ordered``) bounded in bytes as well.

Ingestion fetches many inputs at once, and they finish in any order; shards must still
take them in input order. Finished results wait in the window until every earlier one
has been handed on. Two bounds keep that wait finite:

- ``max_items``: inputs started and not yet handed on (in flight or waiting): the map's
  ``limit``;
- ``max_bytes``: bytes of finished results waiting behind an earlier, unfinished one
  (``held_bytes``; ``peak_bytes`` is its maximum). A result whose bytes do not fit waits
  to enter (its worker pauses), and no new input starts while one waits or the window is
  full. The next result to hand on never waits and is never counted.

So a slow input delays only what comes after it, by at most its own deadline: everything
before it is handed on, the window fills behind it and stops there, and once it ends the
window drains in order. Memory beyond ``max_bytes`` is only what was in flight when the
window filled (results finished while others took the last bytes).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Generic, TypeVar

from anyio.abc import TaskGroup

from .._ordered import OrderedMap, Slot
from ..core import at_least

__all__ = ("ReorderWindow",)

T = TypeVar("T")
R = TypeVar("R")


class ReorderWindow(OrderedMap[T, R], Generic[T, R]):
    """Maps ``fn`` over inputs concurrently and hands results on in input order.

    Args:
        fn: The async function applied to each input.
        max_items: Most inputs started and not yet handed on.
        max_bytes: Most bytes of finished results held behind an unfinished earlier one.
        size_of: The bytes a result holds.
    """

    def __init__(
        self,
        fn: Callable[[T], Awaitable[R]],
        *,
        max_items: int,
        max_bytes: int,
        size_of: Callable[[R], int],
    ) -> None:
        super().__init__(fn, at_least("max_items", max_items, 1))
        self.max_items = self.limit
        self.max_bytes = at_least("max_bytes", max_bytes, 1)
        self._size_of = size_of
        self._waiting = 0  # finished results waiting for their bytes to fit
        self.held_bytes = 0
        self.peak_bytes = 0

    def may_start(self) -> bool:
        """Room for an input, for its bytes, and no finished result waiting to enter."""
        return super().may_start() and self.held_bytes < self.max_bytes and self._waiting == 0

    async def settle(self, slot: Slot, value: R) -> None:
        """Count ``value``'s bytes while it waits behind an earlier input (waiting first
        for them to fit, unless it becomes the next to hand on)."""
        slot.value = value
        size = self._size_of(value)
        if self.is_next(slot):
            return
        if self.held_bytes + size > self.max_bytes:
            self._waiting += 1
            try:
                await self.wait_until(
                    lambda: self.is_next(slot) or self.held_bytes + size <= self.max_bytes
                )
            finally:
                self._waiting -= 1
        if not self.is_next(slot):
            slot.held = size
            self.held_bytes += size
            self.peak_bytes = max(self.peak_bytes, self.held_bytes)

    def handed_on(self, slot: Slot) -> None:
        """``slot``'s bytes are no longer held here."""
        self.held_bytes -= slot.held

    def start(self, group: TaskGroup, upstream: AsyncIterator[T]) -> AsyncGenerator[R, None]:
        """Start mapping ``upstream`` (a window may be opened again once the last is left)."""
        self.held_bytes = self._waiting = 0
        return super().start(group, upstream)
