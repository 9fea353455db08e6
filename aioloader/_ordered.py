"""One ordered map with bounded concurrency, the outcome it carries, and the bound it counts.

``OrderedMap`` maps an async function over an async iterator, at most ``limit`` inputs
between being taken from upstream and being handed on, and hands the results on in input
order:

- results in input order, whatever order the calls finish in;
- an error at its position: a call's error (or upstream's) is raised as itself, not in an
  exception group, when the consumer reaches its position; every result before it is
  handed on first, and no new input starts once a call has failed;
- nothing left running: the calls run in a pool of worker tasks inside the task group the
  map is started in (``start``) or owns (``open``); leaving it cancels every call, and the
  last worker to end closes upstream.

The pool grows to the concurrency used: a worker that takes the last free hand starts
another, up to ``limit``, so tasks are not made per input. Subclasses refine it through
``may_start`` (a further bound on starting an input) and ``settle`` (what a finished call
does before its slot is done); ingestion's ``ReorderWindow`` bounds the bytes held so.

Who uses it: ``Stream.map`` (ordered, ``concurrency > 1``) and ingestion's
``ReorderWindow``. ``Outcome`` is the value-or-error of one position, shared with the
engine's prefetch ring; ``Bound`` is the one counting bound (the engine's reads in flight,
an object store's requests over every thread and loop, an HTTP fetcher's requests in all
and per host).
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio
from anyio.abc import TaskGroup

from ._event_loops import threadsafe_caller

__all__ = ("Bound", "OrderedMap", "Outcome", "Slot")

T = TypeVar("T")
R = TypeVar("R")


class Outcome(Generic[T]):
    """What became of one position: its ``value``, or its ``error`` (then ``value`` is None)."""

    __slots__ = ("error", "value")

    def __init__(self, value: T | None = None, error: BaseException | None = None) -> None:
        self.value = value
        self.error = error


class Slot(Outcome[Any]):
    """The outcome of one input of an ``OrderedMap``; ``done`` is set once it is known.

    ``held`` is what a subclass counted for it while it waits to be handed on (bytes).
    """

    __slots__ = ("done", "held")

    def __init__(self) -> None:
        super().__init__()
        self.done = anyio.Event()
        self.held = 0


async def _aclose(iterator: Any) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        with anyio.CancelScope(shield=True):
            await close()


class OrderedMap(Generic[T, R]):
    """Maps ``fn`` over inputs, ``limit`` at a time, and hands results on in input order.

    Args:
        fn: The async function applied to each input.
        limit: Most inputs taken from upstream and not yet handed on (>= 1; callers check).

    A map runs one upstream at a time; it may be started again once the last run is over.
    """

    def __init__(self, fn: Callable[[T], Awaitable[R]], limit: int) -> None:
        self._fn = fn
        self.limit = limit
        self._slots: deque[Slot] = deque()
        self._changed = anyio.Event()
        self._turn = anyio.Lock()  # taken to read upstream
        self._stopped = False  # upstream ended or failed, or a call failed
        self._workers = self._free = self._live = 0  # made, not mapping, not yet ended
        self._group: TaskGroup | None = None

    @property
    def workers(self) -> int:
        """Worker tasks the latest run has made (the concurrency it used, plus one)."""
        return self._workers

    # -- for subclasses ---------------------------------------------------------------------
    def may_start(self) -> bool:
        """Whether another input may start now (the window has room)."""
        return len(self._slots) < self.limit

    async def settle(self, slot: Slot, value: R) -> None:
        """Store ``value``, the result of ``slot``'s call (a subclass may wait first)."""
        slot.value = value

    def handed_on(self, slot: Slot) -> None:
        """``slot`` has left the map (its result goes to the consumer now)."""

    def is_next(self, slot: Slot) -> bool:
        """Whether ``slot`` is the next to hand on."""
        return bool(self._slots) and self._slots[0] is slot

    def notify(self) -> None:
        """Wake every ``wait_until`` to look again."""
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_until(self, ready: Callable[[], bool]) -> None:
        """Wait until ``ready()`` (looked at after each ``notify``)."""
        while not ready():
            await self._changed.wait()

    # -- running ----------------------------------------------------------------------------
    def start(self, group: TaskGroup, upstream: AsyncIterator[T]) -> AsyncGenerator[R, None]:
        """Start mapping ``upstream`` in ``group``; returns the results, in input order.

        Cancelling ``group`` stops every call; the last worker closes ``upstream``.
        """
        end = Slot()
        self._slots.clear()
        self._turn, self._stopped, self._group = anyio.Lock(), False, group
        self._workers = self._free = self._live = 1
        group.start_soon(self._worker, upstream, end)
        return self._results(end)

    @contextlib.asynccontextmanager
    async def open(self, upstream: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[R]]:
        """The results of ``fn`` over ``upstream``, in order, in a task group of the map's
        own; leaving cancels the rest and closes ``upstream``. An error raised in the block
        leaves it as itself once every task has ended."""
        failure: Exception | None = None
        try:
            async with anyio.create_task_group() as group:
                results = self.start(group, upstream)
                try:
                    yield results
                except Exception as exc:
                    failure = exc
                finally:
                    group.cancel_scope.cancel()
                    with anyio.CancelScope(shield=True):
                        await results.aclose()
        finally:
            await _aclose(upstream)  # never started (cancelled at once): still closed
        if failure is not None:
            raise failure

    async def _worker(self, upstream: AsyncIterator[T], end: Slot) -> None:
        """Take the next input (one worker at a time, so slots keep input order), map it,
        and again; a worker that takes the last free hand starts another."""
        try:
            while True:
                async with self._turn:
                    await self.wait_until(lambda: self._stopped or self.may_start())
                    if self._stopped:
                        return
                    try:
                        item = await upstream.__anext__()
                    except StopAsyncIteration:
                        self._end(end)
                        return
                    except Exception as exc:
                        end.error = exc
                        self._end(end)
                        return
                    slot = Slot()
                    self._slots.append(slot)
                    self.notify()
                self._free -= 1
                if self._free == 0 and self._workers < self.limit:
                    self._workers += 1
                    self._free += 1
                    self._live += 1
                    assert self._group is not None
                    self._group.start_soon(self._worker, upstream, end)
                await self._call(item, slot)
                self._free += 1
        finally:
            self._live -= 1
            if self._live == 0:
                await _aclose(upstream)

    async def _call(self, item: T, slot: Slot) -> None:
        try:
            value = await self._fn(item)
        except Exception as exc:
            slot.error = exc
            self._stopped = True  # nothing after it will be handed on
            self.notify()
        else:
            await self.settle(slot, value)
        slot.done.set()

    def _end(self, end: Slot) -> None:
        self._stopped = True
        self._slots.append(end)
        end.done.set()
        self.notify()

    async def _results(self, end: Slot) -> AsyncGenerator[R, None]:
        while True:
            await self.wait_until(lambda: bool(self._slots))
            slot = self._slots[0]
            await slot.done.wait()
            if slot is end:
                if slot.error is not None:
                    raise slot.error
                return
            self._slots.popleft()
            self.handed_on(slot)
            self.notify()
            if slot.error is not None:
                raise slot.error
            yield slot.value  # type: ignore[misc]  # a slot without an error holds an R


class _Waiter:
    __slots__ = ("count", "event", "granted", "wake")

    def __init__(self, count: int, shared: bool) -> None:
        self.count = count
        self.event = anyio.Event()
        self.wake = threadsafe_caller() if shared else None
        self.granted = False


class Bound:
    """A counting bound: at most ``limit`` units held at once.

    Taking a free unit is a lock and a few integer operations (no checkpoint, no task
    switch); only a request that finds the bound full waits, and a unit given back goes
    straight to the oldest waiter whose request fits. A request of more units than the
    limit passes when nothing else is held (a batch larger than the bound reads alone).

    Args:
        limit: Most units held at once.
        shared: Whether tasks of several threads and event loops use the bound (then a
            waiter is woken on its own loop).

    Attributes:
        limit: Most units held at once (``raise_limit`` raises it).
        in_flight: Units held now.
        peak: Most units ever held at once.
        total: Units ever taken (less those given back by ``unacquire``).
    """

    __slots__ = ("_lock", "_shared", "_waiters", "in_flight", "limit", "peak", "total")

    def __init__(self, limit: int, *, shared: bool = False) -> None:
        self.limit = limit
        self.in_flight = self.peak = self.total = 0
        self._shared = shared
        self._lock = threading.Lock()
        self._waiters: deque[_Waiter] = deque()

    @property
    def in_use(self) -> int:
        """Units held now."""
        return self.in_flight

    def _fits(self, count: int) -> bool:
        return not self.in_flight or self.in_flight + count <= self.limit

    def _take(self, count: int) -> None:
        self.in_flight += count
        self.total += count
        if self.in_flight > self.peak:
            self.peak = self.in_flight

    def try_acquire(self, count: int = 1) -> bool:
        """Take ``count`` units if the bound allows it now."""
        with self._lock:
            if self._waiters or not self._fits(count):
                return False
            self._take(count)
            return True

    async def acquire(self, count: int = 1) -> None:
        """Take ``count`` units, waiting (on this loop) while the bound is full."""
        with self._lock:
            if not self._waiters and self._fits(count):
                self._take(count)
                return
            waiter = _Waiter(count, self._shared)
            self._waiters.append(waiter)
        try:
            await waiter.event.wait()
        except BaseException:
            with self._lock:
                if not waiter.granted:
                    self._waiters.remove(waiter)
                    self._grant()  # the next waiter may fit now
                    raise
            self.release(count)  # granted while being cancelled: pass the units on
            raise

    def _grant(self) -> None:
        """Hand units to the waiters at the head whose requests fit (under the lock)."""
        while self._waiters and self._fits(self._waiters[0].count):
            waiter = self._waiters.popleft()
            self._take(waiter.count)
            waiter.granted = True
            if waiter.wake is None:
                waiter.event.set()
            else:
                with contextlib.suppress(RuntimeError):  # its loop has closed
                    waiter.wake(waiter.event.set)

    def release(self, count: int = 1) -> None:
        """Give ``count`` units back; waiters that now fit get them."""
        with self._lock:
            self.in_flight -= count
            if self._waiters:
                self._grant()

    def unacquire(self) -> None:
        """Give back a unit taken for work that did not happen (not counted in ``total``)."""
        with self._lock:
            self.total -= 1
        self.release()

    def raise_limit(self, limit: int) -> None:
        """Allow ``limit`` units (at least the current limit); waiters that now fit go."""
        with self._lock:
            self.limit = max(self.limit, limit)
            self._grant()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()
