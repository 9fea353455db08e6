"""``FakeDevice``: a device for tests whose copies wait until their event completes."""

from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

POISON = 0xA5
"""The byte a fake device array holds until its copy completes."""


@dataclass(eq=False)
class FakeEvent:
    """An event of a ``FakeDevice``: the ``number``-th recorded, completed or not."""

    number: int
    completed: bool = False


@dataclass(eq=False)
class FakeStaging:
    """A staging buffer of a ``FakeDevice``: host memory and the copies reading it."""

    array: npt.NDArray[Any]
    pending_reads: int = 0


@dataclass(eq=False)
class _Copy:
    source: npt.NDArray[Any]
    target: npt.NDArray[Any]
    checksum: int
    staging: FakeStaging | None
    event: FakeEvent | None = None


def _checksum(array: npt.NDArray[Any]) -> int:
    return zlib.crc32(np.ascontiguousarray(array).tobytes())


def _poisoned(shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    array: npt.NDArray[Any] = np.empty(shape, dtype)
    array.reshape(-1).view(np.uint8)[:] = POISON
    return array


@dataclass(eq=False)
class FakeDevice:
    """A stand-in for an accelerator, for tests on the CPU (``DeviceStream(batches, fake)``).

    A copy is only enqueued: its device array (a new numpy array) holds ``POISON`` bytes
    until the event recorded after it completes, by ``wait`` (the feed waiting) or by
    ``complete`` (the test). Events complete in order, as on one stream. The fake checks
    the rules a real device cannot show and lists every breach in ``violations`` (and
    raises ``AssertionError`` at once): a staging buffer written while a copy still reads
    it, a source that changed before its copy completed, a direct copy from memory that is
    not registered, and arrays handed over before their copy completed.

    Attributes:
        can_register: whether ``register`` page-locks memory in place (shared memory).
        pinned_allocations: staging buffers allocated.
        registered: ranges registered now, address to size.
        registrations: ``register`` calls that succeeded.
        copies_enqueued: copies enqueued.
        copies_completed: copies completed.
        waits: times the feed blocked on an event.
        handed_over: batches handed over.
        violations: what the feed did wrong, in words.
    """

    can_register: bool = False
    name: str = "fake"
    pinned_allocations: int = 0
    registered: dict[int, int] = field(default_factory=dict)
    registrations: int = 0
    copies_enqueued: int = 0
    copies_completed: int = 0
    waits: int = 0
    handed_over: int = 0
    violations: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self._copies: list[_Copy] = []
        self._events: list[FakeEvent] = []
        self._recorded = 0

    def _violation(self, text: str) -> None:
        self.violations.append(text)
        raise AssertionError(text)

    # -- the DeviceBackend protocol ----------------------------------------------------

    def alloc_staging(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> FakeStaging:
        """A new staging buffer (counted in ``pinned_allocations``)."""
        with self._lock:
            self.pinned_allocations += 1
        return FakeStaging(np.empty(shape, dtype))

    def fill(self, staging: FakeStaging, array: npt.NDArray[Any]) -> None:
        """Write ``array`` into ``staging``; a breach if a pending copy still reads it."""
        with self._lock:
            if staging.pending_reads:
                self._violation(
                    f"a staging buffer of shape {staging.array.shape} was written while "
                    f"{staging.pending_reads} copy(ies) from it were pending"
                )
        np.copyto(staging.array, array)

    def register(self, address: int, size: int) -> bool:
        """Page-lock ``[address, address + size)`` in place if ``can_register``."""
        with self._lock:
            if not self.can_register:
                return False
            self.registered[address] = size
            self.registrations += 1
        return True

    def unregister(self, address: int) -> None:
        """Forget a registered range."""
        with self._lock:
            if self.registered.pop(address, None) is None:
                self._violation(f"unregister of address {address:#x} that is not registered")

    def _is_registered(self, array: npt.NDArray[Any]) -> bool:
        start = int(array.ctypes.data)
        return any(
            low <= start and start + array.nbytes <= low + size
            for low, size in self.registered.items()
        )

    def copy_async(self, source: FakeStaging | npt.NDArray[Any]) -> npt.NDArray[Any]:
        """A poisoned device array; its copy from ``source`` waits for the next event."""
        with self._lock:
            staging = source if isinstance(source, FakeStaging) else None
            host = source.array if isinstance(source, FakeStaging) else source
            if staging is None and not self._is_registered(host):
                self._violation(
                    f"a direct copy from host memory at {int(host.ctypes.data):#x} that is "
                    "not registered"
                )
            if staging is not None:
                staging.pending_reads += 1
            target = _poisoned(host.shape, host.dtype)
            self._copies.append(_Copy(host, target, _checksum(host), staging))
            self.copies_enqueued += 1
        return target

    def record(self) -> FakeEvent:
        """An event after every copy enqueued so far."""
        with self._lock:
            self._recorded += 1
            event = FakeEvent(self._recorded)
            for copy in self._copies:
                if copy.event is None:
                    copy.event = event
            self._events.append(event)
        return event

    def query(self, event: FakeEvent) -> bool:
        """Whether ``event`` has completed."""
        return event.completed

    def wait(self, event: FakeEvent) -> None:
        """Complete every event up to ``event`` (the feed blocks on it)."""
        with self._lock:
            if not event.completed:
                self.waits += 1
            while not event.completed:
                self._complete_next()

    def hand_over(self, arrays: list[Any], event: FakeEvent) -> None:
        """A breach unless ``event`` (and so every copy into ``arrays``) has completed."""
        with self._lock:
            if not event.completed:
                self._violation(
                    f"a batch was handed over before its copy completed (event {event.number})"
                )
            self.handed_over += 1

    def reusable(self, staging: FakeStaging) -> bool:
        """Always: a fake device array never keeps its staging buffer."""
        return True

    def convert_other(self, value: Any) -> Any | None:
        """Only numpy leaves are copied."""
        return None

    def rebuild(self, fields: dict[str, Any]) -> dict[str, Any]:
        """A pooled batch becomes a dict of its fields."""
        return dict(fields)

    # -- for tests -----------------------------------------------------------------------

    @property
    def pending_events(self) -> int:
        """Events recorded and not yet completed."""
        with self._lock:
            return sum(not event.completed for event in self._events)

    def complete(self, count: int | None = None) -> int:
        """Complete the next ``count`` events in order (all by default); how many were."""
        done = 0
        with self._lock:
            while self._events and (count is None or done < count):
                self._complete_next()
                done += 1
        return done

    def _complete_next(self) -> None:
        event = self._events.pop(0)
        finished = [copy for copy in self._copies if copy.event is event]
        self._copies = [copy for copy in self._copies if copy.event is not event]
        for copy in finished:
            if _checksum(copy.source) != copy.checksum:
                self.violations.append(
                    f"the source of a copy of shape {copy.source.shape} changed while the "
                    "copy was pending"
                )
            np.copyto(copy.target, copy.source)
            if copy.staging is not None:
                copy.staging.pending_reads -= 1
            self.copies_completed += 1
        event.completed = True


__all__ = ("POISON", "FakeDevice", "FakeEvent", "FakeStaging")
