"""Small helpers the sources share: ordered gather, per-event-loop state, shared limits.

They work on every anyio backend. The ordered gather and the running-loop check are
``aioloader._event_loops``' (asyncio's own tasks on asyncio, which cost several times less
per read than anyio's portable ones), named here for the sources.
``SharedLimit`` is the package's one counting bound (``aioloader._ordered.Bound``), shared
by threads and loops.

``gather_ordered`` keeps its own form rather than running the package's ``OrderedMap``
(``aioloader._ordered``), whose promises it shares (results in order, the error of the
lowest position raised as itself, nothing left running): a batch's reads are a list known
at once, not an iterator, and the map's worker turn costs more per read. Measured in Python
calls (``sys.setprofile`` "call" events, coroutine resumptions included), ten batches of 34
reads that return at once, less ten batches of 2: ``gather_ordered`` 28 calls per read on
asyncio, the map 94; on trio 136 and 119.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Generic, TypeVar

import anyio

from .._event_loops import gather_ordered as gather_ordered
from .._event_loops import loop_key
from .._event_loops import running_asyncio_loop as running_asyncio_loop
from .._ordered import Bound

T = TypeVar("T")


class SharedLimit(Bound):
    """The counting bound (``Bound``) shared by every thread and event loop using it.

    A source used from several threads, each running its own loop (say, one loader per
    thread), still has at most ``limit`` requests in flight in all; a waiter is woken on its
    own loop when a unit is handed to it.
    """

    __slots__ = ()

    def __init__(self, limit: int) -> None:
        super().__init__(limit, shared=True)


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
