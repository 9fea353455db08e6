"""Small helpers the sources share: ordered gather, per-event-loop state, shared limits.

They work on every anyio backend. The ordered gather, the semaphore and the running-loop
check are ``aioloader._event_loops``' (asyncio's own tasks and semaphores on asyncio, which
cost several times less per read than anyio's portable ones), named here for the sources.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Generic, TypeVar

import anyio

from .._event_loops import gather_ordered as gather_ordered
from .._event_loops import loop_key, threadsafe_caller
from .._event_loops import running_asyncio_loop as running_asyncio_loop
from .._event_loops import semaphore as semaphore

T = TypeVar("T")


class _Waiter:
    __slots__ = ("event", "granted", "wake")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.wake = threadsafe_caller()
        self.granted = False


class SharedLimit:
    """A bound on concurrent work shared by every thread and event loop using one object.

    A source used from several threads, each running its own loop (say, one loader per
    thread), still has at most ``limit`` requests in flight in all. Taking a free unit is
    a lock and an integer; a waiter is woken on its own loop when a unit is handed to it.
    """

    __slots__ = ("_count", "_limit", "_lock", "_peak", "_waiters")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._count = 0
        self._peak = 0
        self._lock = threading.Lock()
        self._waiters: deque[_Waiter] = deque()

    @property
    def in_use(self) -> int:
        """Units held now."""
        return self._count

    @property
    def peak(self) -> int:
        """Most units ever held at once."""
        return self._peak

    async def acquire(self) -> None:
        """Take a unit, waiting (on this loop) while all are held."""
        with self._lock:
            if self._count < self._limit:
                self._count += 1
                self._peak = max(self._peak, self._count)
                return
            waiter = _Waiter()
            self._waiters.append(waiter)
        try:
            await waiter.event.wait()
        except BaseException:
            with self._lock:
                if not waiter.granted:
                    self._waiters.remove(waiter)
                    raise
            self.release()  # handed a unit while being cancelled: pass it on
            raise

    def release(self) -> None:
        """Give a unit back, or hand it straight to the oldest waiter."""
        with self._lock:
            if self._waiters:
                waiter = self._waiters.popleft()
                waiter.granted = True
                waiter.wake(waiter.event.set)
                return
            self._count -= 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


async def _close_at_loop_end(
    close: Callable[[T], Awaitable[object]], value: T
) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        with anyio.CancelScope(shield=True):
            await close(value)


class PerLoop(Generic[T]):
    """A value built lazily for the running event loop (limiters cannot cross loops).

    A source object may be used from several event loops in turn (tests, notebooks, each
    ``for batch in loader`` of a synchronous caller); each loop gets a fresh value from
    ``factory``. Only the latest loop's value is kept.

    With ``close``, each value is closed on its own loop when that loop ends (or when
    ``aclose`` is awaited): a suspended async generator holds it, and event loops
    (asyncio, uvloop, trio) finish every such generator as they shut down. So a client
    built for a loop never outlives it unclosed.
    """

    __slots__ = ("_close", "_factory", "_keeper", "_key", "_value")

    def __init__(
        self, factory: Callable[[], T], close: Callable[[T], Awaitable[object]] | None = None
    ) -> None:
        self._factory = factory
        self._close = close
        self._key: object = None
        self._value: T | None = None
        self._keeper: AsyncGenerator[None, None] | None = None

    def get(self) -> T:
        """The value for the running loop, built on first use."""
        key = loop_key()
        if self._value is None or self._key is not key:
            self._value = self._factory()
            self._key = key
            if self._close is not None:
                keeper = _close_at_loop_end(self._close, self._value)
                _start(keeper)
                self._keeper = keeper
        return self._value

    def peek(self) -> T | None:
        """The latest loop's value if one was built (without building one)."""
        return self._value

    def forget(self) -> None:
        """Drop the value without closing it now; the next ``get()`` builds a fresh one."""
        self._value = self._keeper = None

    async def aclose(self) -> None:
        """Close the latest loop's value now (``close``), and forget it."""
        value, keeper = self._value, self._keeper
        self._value = self._keeper = None
        self._key = None
        if keeper is not None:
            await keeper.aclose()
        elif value is not None and self._close is not None:
            with anyio.CancelScope(shield=True):
                await self._close(value)


def _start(generator: AsyncGenerator[None, None]) -> None:
    """Run ``generator`` to its first ``yield`` now (it awaits nothing before it).

    Starting it here, on the running loop's thread, registers it with that loop's async
    generator hooks, so the loop finishes it when it shuts down.
    """
    step = generator.__anext__()
    try:
        step.send(None)
    except StopIteration:
        return
    raise RuntimeError("the keeper awaited before its first yield")  # pragma: no cover
