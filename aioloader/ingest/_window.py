"""The reorder window: an ordered concurrent map bounded in items and in bytes.

Ingestion fetches many inputs at once, and they finish in any order; shards must still
take them in input order. Finished results wait in the window until every earlier one
has been handed on. Two bounds keep that wait finite:

- ``max_items``: inputs started and not yet handed on (in flight or waiting);
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

import contextlib
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio
from anyio.abc import TaskGroup

__all__ = ("ReorderWindow",)

T = TypeVar("T")
R = TypeVar("R")


class _Slot:
    __slots__ = ("counted", "done", "error", "value")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.value: Any = None
        self.error: Exception | None = None
        self.counted = 0


class ReorderWindow(Generic[T, R]):
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
        for name, value in (("max_items", max_items), ("max_bytes", max_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1 but got {value!r}")
        self._fn = fn
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._size_of = size_of
        self._slots: deque[_Slot] = deque()
        self._changed = anyio.Event()
        self._waiting = 0
        self.held_bytes = 0
        self.peak_bytes = 0
        self._turn = anyio.Lock()  # taken to read upstream
        self._ended = False  # upstream is exhausted or failed
        self._workers = self._free = 0  # worker tasks, and those not mapping an input
        self._group: TaskGroup | None = None

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            await self._changed.wait()

    def _may_start(self) -> bool:
        return (
            len(self._slots) < self.max_items
            and self.held_bytes < self.max_bytes
            and self._waiting == 0
        )

    async def _work(self, item: T, slot: _Slot) -> None:
        try:
            value = await self._fn(item)
        except Exception as exc:
            slot.error = exc
        else:
            slot.value = value
            size = self._size_of(value)
            if self._slots[0] is not slot:
                if self.held_bytes + size > self.max_bytes:
                    self._waiting += 1
                    try:
                        await self._until(
                            lambda: (
                                self._slots[0] is slot or self.held_bytes + size <= self.max_bytes
                            )
                        )
                    finally:
                        self._waiting -= 1
                if self._slots[0] is not slot:
                    slot.counted = size
                    self.held_bytes += size
                    self.peak_bytes = max(self.peak_bytes, self.held_bytes)
        slot.done.set()

    async def _worker(self, upstream: AsyncIterator[T], end: _Slot) -> None:
        """Take the next input (one worker at a time, so slots keep input order), map it,
        and again; a worker that takes the last free hand starts another, up to
        ``max_items``, so the pool grows to the concurrency used and tasks are not made
        per input."""
        while True:
            async with self._turn:
                if self._ended:
                    return
                await self._until(self._may_start)
                try:
                    item = await upstream.__anext__()
                except StopAsyncIteration:
                    self._end(end)
                    return
                except Exception as exc:
                    end.error = exc
                    self._end(end)
                    return
                slot = _Slot()
                self._slots.append(slot)
                self._notify()
            self._free -= 1
            if self._free == 0 and self._workers < self.max_items:
                self._workers += 1
                self._free += 1
                assert self._group is not None
                self._group.start_soon(self._worker, upstream, end)
            await self._work(item, slot)
            self._free += 1

    def _end(self, end: _Slot) -> None:
        self._ended = True
        self._slots.append(end)
        end.done.set()
        self._notify()

    @contextlib.asynccontextmanager
    async def open(self, upstream: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[R]]:
        """The results of ``fn`` over ``upstream``, in order; leaving cancels the rest and
        closes ``upstream``."""
        end = _Slot()
        failure: Exception | None = None
        self._slots.clear()  # a window may be opened again once the last one is left
        self.held_bytes = 0
        self._turn, self._ended, self._workers, self._free = anyio.Lock(), False, 1, 1
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                group.start_soon(self._worker, upstream, end)
                results = self._results(end)
                try:
                    yield results
                except Exception as exc:  # raised as itself once the tasks have stopped
                    failure = exc
                finally:
                    group.cancel_scope.cancel()
                    with anyio.CancelScope(shield=True):
                        await results.aclose()
        finally:
            close = getattr(upstream, "aclose", None)
            if close is not None:
                with anyio.CancelScope(shield=True):
                    await close()
        if failure is not None:
            raise failure

    async def _results(self, end: _Slot) -> AsyncGenerator[R, None]:
        while True:
            await self._until(lambda: bool(self._slots))
            slot = self._slots[0]
            await slot.done.wait()
            if slot is end:
                if slot.error is not None:
                    raise slot.error
                return
            self._slots.popleft()
            self.held_bytes -= slot.counted
            self._notify()
            if slot.error is not None:
                raise slot.error
            yield slot.value
