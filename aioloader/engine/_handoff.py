"""A bounded hand-off of finished batches from the event loop's thread to a consumer thread.

The loop side ``put``s without blocking the loop (it awaits a free slot); the consumer side
``take``s, blocking its own thread only while the hand-off is empty. A thread hop happens
only when one side actually waits for the other. The loop side also learns how many items
the consumer has received (``collect``), so a lending ring counts what the consumer holds.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")


class HandOffClosed(Exception):  # noqa: N818 - a state, not a fault
    """The consumer has left: nothing more is taken."""


class _End:
    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class BatchHandOff(Generic[T]):
    """``capacity`` slots between a producer task on an event loop and a consumer thread."""

    def __init__(
        self,
        capacity: int,
        call_soon: Callable[[Callable[[], object]], object],
        release: Callable[[T], None],
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1 but got {capacity}")
        self._capacity = capacity
        self._call_soon = call_soon
        self._release = release
        self._items: deque[T | _End] = deque()
        self._lock = threading.Lock()
        self._filled = threading.Condition(self._lock)
        self._space: anyio.Event | None = None  # exists only while the producer waits
        self._closed = False
        self._ended = False
        self._received = 0  # items taken since the last ``collect``
        self._wake: Callable[[], object] | None = None  # armed by ``collect`` when none

    # -- producer (the event loop's thread) -------------------------------------------------
    async def put(self, item: T) -> None:
        """Add ``item``, waiting (without blocking the loop) while every slot is taken.

        Raises HandOffClosed, after releasing ``item``, once the consumer has left.
        """
        while True:
            with self._lock:
                if self._closed:
                    break
                if len(self._items) < self._capacity:
                    self._items.append(item)
                    self._filled.notify()
                    return
                space = self._space = anyio.Event()
            await space.wait()
        self._release(item)
        raise HandOffClosed

    def finish(self, error: BaseException | None = None) -> None:
        """No more items: the consumer's next take past the last one raises ``error``
        (``StopIteration`` when it is None). Only the first call counts."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
            self._items.append(_End(error))
            self._filled.notify()

    def collect(self, wake: Callable[[], object]) -> int:
        """How many items the consumer has taken since the last call; when none, ``wake``
        is called on the loop (through ``call_soon``) at its next take."""
        with self._lock:
            received, self._received = self._received, 0
            self._wake = None if received else wake
        return received

    # -- consumer (any other thread) ------------------------------------------------------
    def take(self) -> T:
        """The next item, in order; raises the producer's error, or StopIteration at the end."""
        with self._lock:
            while not self._items:
                self._filled.wait()
            item = self._items[0]
            if isinstance(item, _End):
                if item.error is not None:
                    raise item.error
                raise StopIteration
            self._items.popleft()
            self._received += 1
            space, self._space = self._space, None
            wake, self._wake = self._wake, None
        if space is not None:
            self._call_soon(space.set)
        if wake is not None:
            with contextlib.suppress(RuntimeError):  # a stopped loop: nobody waits any more
                self._call_soon(wake)
        return item

    def close(self) -> None:
        """The consumer leaves: release every item not taken and wake a waiting producer."""
        with self._lock:
            self._closed = True
            left = [item for item in self._items if not isinstance(item, _End)]
            self._items.clear()
            space, self._space = self._space, None
        for item in left:
            self._release(item)
        if space is not None:
            with contextlib.suppress(RuntimeError):  # a stopped loop: nobody waits any more
                self._call_soon(space.set)
