"""The ordered prefetch ring (docs/contract.md, "Order, errors, resumption").

Step ``g`` lives in slot ``g mod capacity``. A step may be claimed only while
``g < next_to_take - lent + depth`` (``depth <= capacity``, deepened by ``deepen``), so slots
never collide; builders fill slots in any order;
the consumer takes them in step order. The bookkeeping is synchronous (``*_nowait``);
the async methods only wait for it to change.

A lending ring (``lend``: the sync facade, which hands batches to another thread) counts a
batch taken as ``lent`` until its consumer has received it, so ``depth`` bounds the steps
prepared ahead of the batch the consumer holds, wherever the others wait.

The ring keeps its own bookkeeping rather than running the package's ``OrderedMap``
(``aioloader._ordered``; it shares that map's ``Outcome``): its steps are claimed and filled
without a task of the loop (the engine's feed claims a step inside the consumer's take and
fills it from build threads and worker processes), its depth grows while it runs and a lent
batch counts until received. Measured in Python calls (``sys.setprofile`` "call" events,
coroutine resumptions included, as tests/engine/test_engine_calls.py counts them): the
ordered map spends 93 calls per input on asyncio and 119 on trio (1,100 inputs less 100,
``limit=8``, a function that returns at once) on its turn lock, slot events and wake-ups,
about what a whole step of 32 samples costs the engine at ``workers=0`` (86-131 calls,
uvloop to trio), and it could not take a step on a thread without the loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from .._errors import LoaderClosedError
from .._event_loops import LoopEvent, loop_event_type
from .._ordered import Outcome

T = TypeVar("T")


class WouldBlock(Exception):  # noqa: N818 - the name anyio and trio use
    """The ring cannot do that now; the async form would wait."""


class Receipts(Protocol):
    """Where a lending ring learns that its consumer received batches it lent."""

    def collect(self, wake: Callable[[], None]) -> int:
        """How many lent batches were received since the last call; when none, arrange
        for ``wake`` to run on the ring's event loop at the next receipt."""


@dataclass(frozen=True, slots=True)
class RingStatistics:
    """A snapshot of the ring.

    Attributes:
        capacity: slots allocated (the most ``depth`` can grow to).
        depth: how many steps may be prepared ahead of the consumer now (``prefetch``).
        next_to_take: the step the ring hands out next.
        next_to_claim: the step a builder claims next.
        building: steps claimed and not yet filled.
        ready: steps filled and not yet taken.
        stop: the step the stream ends before (None: no end).
        lent: batches taken but not yet received by the consumer, as last counted (the
            sync facade's hand-off); they count against ``depth``.
    """

    capacity: int
    depth: int
    next_to_take: int
    next_to_claim: int
    building: int
    ready: int
    stop: int | None
    lent: int


class PrefetchRing(Generic[T]):
    """Slots for the batches of steps ``[start, stop)``, filled in any order, taken in order."""

    def __init__(
        self,
        capacity: int,
        start: int,
        stop: int | None,
        release: Callable[[T], None] | None = None,
        depth: int | None = None,
    ) -> None:
        self._capacity = capacity
        self._depth = capacity if depth is None else min(depth, capacity)
        self._release = release
        self._slots: list[Outcome[T] | None] = [None] * capacity
        self._next_to_take = start
        self._next_to_claim = start
        self._stop = stop
        self._building = 0
        self._ready = 0
        self._closed = False
        self._failure: BaseException | None = None
        self._event: Callable[[], LoopEvent] | None = None  # the loop's own, at the first wait
        self._taker: LoopEvent | None = None  # exists only while the consumer waits
        self._claimers: deque[LoopEvent] = deque()  # builders waiting for a step, in order
        self._receipts: Receipts | None = None
        self._lent = 0
        self._on_take: Callable[[], None] | None = None

    def _notify(self) -> None:
        """Wake every waiter (the ring closed, failed, or its end moved)."""
        self._wake_taker()
        claimers, self._claimers = self._claimers, deque()
        for event in claimers:
            event.set()

    def _wake_taker(self) -> None:
        taker = self._taker
        if taker is not None:
            self._taker = None
            taker.set()

    def _wake_claimer(self) -> None:
        """The window may have opened: wake the builder that has waited longest. A woken
        builder that claims a step (or finds the end) wakes the next, so a take wakes one
        builder and one more, never all of them."""
        if self._claimers:
            self._claimers.popleft().set()

    def _new_event(self) -> LoopEvent:
        make = self._event
        if make is None:
            make = self._event = loop_event_type()
        return make()

    async def _wait_to_claim(self) -> None:
        event = self._new_event()
        self._claimers.append(event)
        try:
            await event.wait()
        except BaseException:
            if event.is_set():  # woken and cancelled: the wake goes to the next builder
                self._wake_claimer()
            else:
                self._claimers.remove(event)
            raise

    @property
    def depth(self) -> int:
        """How many steps may be claimed ahead of the consumer."""
        return self._depth

    def deepen(self, depth: int) -> None:
        """Let builders claim up to ``depth`` steps ahead (at most the capacity)."""
        depth = min(max(depth, self._depth), self._capacity)
        if depth != self._depth:
            self._depth = depth
            self._wake_claimer()

    @property
    def next_to_take(self) -> int:
        """The step the consumer receives next."""
        return self._next_to_take

    def lend(self, receipts: Receipts) -> None:
        """Count every batch taken from now on as lent until ``receipts`` reports it
        received: the window stays ``depth`` steps past the consumer's batch."""
        self._receipts = receipts

    def on_take(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback()`` after each batch taken, on the taking thread, before anyone is
        woken (the engine's feed claims the step the take lets in without the loop)."""
        self._on_take = callback

    def statistics(self) -> RingStatistics:
        """Current occupancy and cursors."""
        return RingStatistics(
            capacity=self._capacity,
            depth=self._depth,
            next_to_take=self._next_to_take,
            next_to_claim=self._next_to_claim,
            building=self._building,
            ready=self._ready,
            stop=self._stop,
            lent=self._lent,
        )

    def _finished(self) -> bool:
        return self._closed or (self._stop is not None and self._next_to_claim >= self._stop)

    def _open(self) -> bool:
        """Whether the next step is inside the window ``next_to_take - lent + depth``,
        counting the receipts of a lending ring (when none came, the next one wakes a
        builder)."""
        while self._next_to_claim >= self._next_to_take - self._lent + self._depth:
            receipts = self._receipts
            if not self._lent or receipts is None:
                return False
            received = receipts.collect(self._wake_claimer)
            if not received:
                return False
            self._lent -= received
        return True

    def claim_nowait(self) -> int | None:
        """Claim the next step to build; ``None`` when there is nothing left to claim.

        Raises WouldBlock when the window ``next_to_take - lent + depth`` is full.
        """
        if self._finished():
            return None
        if not self._open():
            raise WouldBlock
        step = self._next_to_claim
        self._next_to_claim = step + 1
        self._building += 1
        return step

    async def claim(self) -> int | None:
        """Wait until a step can be claimed; ``None`` when the ring is finished or closed."""
        while True:
            try:
                step = self.claim_nowait()
            except WouldBlock:
                await self._wait_to_claim()
            else:
                if self._claimers and (self._finished() or self._open()):
                    self._wake_claimer()  # there is a step (or the end) for the next one too
                return step

    def fill_nowait(self, step: int, value: T | None, error: BaseException | None = None) -> None:
        """Store the batch (or the error) of a claimed step."""
        self._building -= 1
        if self._closed:
            if value is not None and self._release is not None:
                self._release(value)
            self._notify()
            return
        self._slots[step % self._capacity] = Outcome(value, error)
        self._ready += 1
        if error is not None and (self._stop is None or step + 1 < self._stop):
            self._stop = step + 1
            self._notify()  # builders waiting for a step past it are done
        else:
            self._wake_taker()

    def abandon_nowait(self) -> None:
        """A claimed step will not be filled (its builder was cancelled)."""
        self._building -= 1
        self._notify()

    def take_nowait(self) -> T:
        """The batch of ``next_to_take``; raises its error, or WouldBlock if not ready.

        Raises StopAsyncIteration past the stop step and LoaderClosedError after close.
        """
        if self._failure is not None:
            failure, self._failure = self._failure, None
            self._stop = self._next_to_take
            raise failure
        if self._closed:
            raise LoaderClosedError("the batch stream is closed")
        step = self._next_to_take
        if self._stop is not None and step >= self._stop:
            raise StopAsyncIteration
        index = step % self._capacity
        outcome = self._slots[index]
        if outcome is None:
            raise WouldBlock
        self._slots[index] = None
        self._ready -= 1
        self._next_to_take = step + 1
        if self._receipts is not None and outcome.error is None:
            self._lent += 1
        if self._on_take is not None:
            self._on_take()
        self._wake_claimer()
        if outcome.error is not None:
            self._stop = step + 1
            raise outcome.error
        return outcome.value  # type: ignore[return-value]

    async def take(self) -> T:
        """Wait for the batch of ``next_to_take`` and return it (or raise its error)."""
        while True:
            try:
                return self.take_nowait()
            except WouldBlock:
                taker = self._taker
                if taker is None:
                    taker = self._taker = self._new_event()
                await taker.wait()

    def fail_nowait(self, error: BaseException) -> None:
        """Make the consumer's next take raise ``error`` (the engine itself failed)."""
        self._failure = error
        self._notify()

    def close_nowait(self) -> None:
        """Stop claiming and drop every filled slot, releasing each batch not yet taken."""
        if self._closed:
            return
        self._closed = True
        for index, outcome in enumerate(self._slots):
            self._slots[index] = None
            if outcome is not None and outcome.value is not None and self._release is not None:
                self._release(outcome.value)
        self._ready = 0
        self._notify()
