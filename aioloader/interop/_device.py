"""The device feed's machinery: a small device protocol, pooled staging, copies in flight.

A batch crosses to a device in three moves. Each numpy leaf is written into a staging
buffer (page-locked host memory, pooled by ``(shape, dtype)``) unless it already lies in
page-locked memory (a worker process's shared memory, registered once); the host batch
is released as soon as its bytes are staged. A copy into a fresh device array is enqueued
on the device's side stream, and an event is recorded after it. The batch is handed over
only once that event has completed; then its staging buffers go back to the pool.

The device is anything that follows ``DeviceBackend``: torch on CUDA (or the CPU), jax,
or ``FakeDevice``, which defers every copy until its event completes so that tests can
check the rules above on a machine without an accelerator.
"""

from __future__ import annotations

import mmap
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..core import release_batch
from ._walk import map_batch

Key = tuple[tuple[int, ...], str]


class DeviceBackend(Protocol):
    """What the feed asks of a device; one copy stream, events in order (FIFO).

    ``copy_async`` enqueues a copy into a fresh device array and returns it at once;
    ``record`` returns an event that completes after every copy enqueued before it.
    """

    name: str
    """How messages name the device (``"cuda:0"``, ``"fake"``)."""

    def alloc_staging(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        """A new page-locked host buffer of ``shape`` and ``dtype``."""
        ...

    def fill(self, staging: Any, array: npt.NDArray[Any]) -> None:
        """Copy ``array`` (same shape and dtype) into ``staging`` on the host, now."""
        ...

    def register(self, address: int, size: int) -> bool:
        """Page-lock existing host memory; whether copies may now read it directly."""
        ...

    def unregister(self, address: int) -> None:
        """Undo a successful ``register``."""
        ...

    def copy_async(self, source: Any) -> Any:
        """A fresh device array; the copy from ``source`` (staging, or a registered host
        array) is enqueued on the side stream."""
        ...

    def record(self) -> Any:
        """An event after every copy enqueued so far."""
        ...

    def query(self, event: Any) -> bool:
        """Whether ``event`` has completed (never blocks)."""
        ...

    def wait(self, event: Any) -> None:
        """Block the calling thread until ``event`` has completed."""
        ...

    def hand_over(self, arrays: list[Any], event: Any) -> None:
        """The consumer is about to use ``arrays``, whose copies ``event`` covers."""
        ...

    def reusable(self, staging: Any) -> bool:
        """Whether ``staging`` may serve another batch (False: a device array kept it)."""
        ...

    def convert_other(self, value: Any) -> Any | None:
        """A framework leaf that is not numpy, moved to the device; None if not a leaf."""
        ...

    def rebuild(self, fields: dict[str, Any]) -> Any:
        """The device form of a pooled aioloader batch from its converted fields."""
        ...


@dataclass(frozen=True, slots=True)
class DeviceStatistics:
    """A snapshot of a device feed.

    Attributes:
        batches: Batches handed over.
        host_waits: Hand-overs that had to wait for their copy to complete.
        copies: Device copies enqueued (one per array).
        direct_copies: Of those, copies read straight from registered host memory.
        staging_allocations: Staging buffers allocated (page-locked on an accelerator).
        staging_reuses: Staging buffers taken again from the pool.
        staging_held: Free staging buffers the pool holds now.
        registrations: Host memory ranges registered (page-locked in place), alive now.
        in_flight: Batches whose copies are enqueued and not yet handed over.
    """

    batches: int
    host_waits: int
    copies: int
    direct_copies: int
    staging_allocations: int
    staging_reuses: int
    staging_held: int
    registrations: int
    in_flight: int


class StagingPool:
    """Free staging buffers by ``(shape, dtype)``; the least recently used key gives way."""

    __slots__ = ("_backend", "_free", "allocations", "held", "limit", "reuses")

    def __init__(self, backend: DeviceBackend) -> None:
        self._backend = backend
        self._free: OrderedDict[Key, list[Any]] = OrderedDict()
        self.allocations = self.reuses = self.held = 0
        self.limit = 1

    def take(self, key: Key) -> Any:
        """A staging buffer of ``key``: a free one, else a new one."""
        free = self._free.get(key)
        if free:
            self._free.move_to_end(key)
            self.held -= 1
            self.reuses += 1
            return free.pop()
        self.allocations += 1
        return self._backend.alloc_staging(key[0], np.dtype(key[1]))

    def give(self, key: Key, staging: Any) -> None:
        """Keep ``staging`` for another batch (its copy has completed)."""
        if not self._backend.reusable(staging):
            return
        self._free.setdefault(key, []).append(staging)
        self._free.move_to_end(key)
        self.held += 1
        while self.held > self.limit:
            oldest = next(iter(self._free))
            buffers = self._free[oldest]
            buffers.pop()
            self.held -= 1
            if not buffers:
                del self._free[oldest]

    def clear(self) -> None:
        """Drop every free buffer."""
        self._free.clear()
        self.held = 0


def _mapping_of(array: npt.NDArray[Any]) -> mmap.mmap | None:
    """The ``mmap`` under ``array`` (through views and memoryviews), if any."""
    base: Any = array
    while True:
        if isinstance(base, np.ndarray):
            base = base.base
        elif isinstance(base, memoryview):
            base = base.obj
        else:
            return base if isinstance(base, mmap.mmap) else None


class Registrations:
    """Mapped host memory page-locked in place, cached by ``(address, size)``.

    A registered mapping is kept alive (and mapped) until ``close``, which unregisters it.
    """

    __slots__ = ("_backend", "_by_id", "_registered")

    def __init__(self, backend: DeviceBackend) -> None:
        self._backend = backend
        self._by_id: dict[int, tuple[npt.NDArray[np.uint8], bool]] = {}
        self._registered: dict[tuple[int, int], npt.NDArray[np.uint8]] = {}

    def covers(self, array: npt.NDArray[Any]) -> bool:
        """Whether a copy may read ``array`` where it lies (registering its mapping once)."""
        flags = array.flags
        if not (flags.c_contiguous and flags.writeable) or array.nbytes == 0:
            return False
        mapping = _mapping_of(array)
        if mapping is None:
            return False
        known = self._by_id.get(id(mapping))
        if known is None:
            whole = np.frombuffer(mapping, np.uint8)  # keeps the mapping alive
            key = (int(whole.ctypes.data), int(whole.nbytes))
            done = whole.flags.writeable and self._backend.register(*key)
            if done:
                self._registered[key] = whole
            known = self._by_id[id(mapping)] = (whole, done)
        return known[1]

    @property
    def count(self) -> int:
        """Ranges registered now."""
        return len(self._registered)

    def close(self) -> None:
        """Unregister every range and let go of the mappings."""
        for address, _ in self._registered:
            self._backend.unregister(address)
        self._registered.clear()
        self._by_id.clear()


@dataclass(slots=True)
class _InFlight:
    batch: Any
    arrays: list[Any]
    event: Any
    staged: list[tuple[Key, Any]]
    host: Any


class DeviceFeed:
    """Batches in flight to a device, handed over in order once copied; not thread-safe.

    Args:
        backend: the device.
        depth: most batches in flight at once (copies enqueued, not handed over).
    """

    def __init__(self, backend: DeviceBackend, depth: int) -> None:
        self.backend = backend
        self.depth = depth
        self.staging = StagingPool(backend)
        self.registrations = Registrations(backend)
        self._in_flight: deque[_InFlight] = deque()
        self._batches = self._waits = self._copies = self._direct = 0

    @property
    def pending(self) -> int:
        """Batches in flight."""
        return len(self._in_flight)

    def submit(self, batch: Any) -> None:
        """Stage ``batch`` and enqueue its copies; release it once its bytes are staged."""
        backend, staged, arrays = self.backend, [], []
        direct = 0

        def convert(value: Any) -> Any | None:
            nonlocal direct
            if isinstance(value, np.generic):
                value = np.asarray(value)
            if not isinstance(value, np.ndarray):
                return backend.convert_other(value)
            if self.registrations.covers(value):
                device = backend.copy_async(value)
                direct += 1
            else:
                key: Key = (value.shape, value.dtype.str)
                buffer = self.staging.take(key)
                staged.append((key, buffer))
                backend.fill(buffer, value)
                device = backend.copy_async(buffer)
            arrays.append(device)
            return device

        try:
            converted = map_batch(batch, convert, backend.rebuild)
        except BaseException:
            event = backend.record()
            backend.wait(event)
            self._recycle(staged)
            release_batch(batch)
            raise
        event = backend.record()
        self._copies += len(arrays)
        self._direct += direct
        self.staging.limit = max(self.staging.limit, 2 * self.depth * len(staged))
        host = batch if direct else None
        if not direct:
            release_batch(batch)  # every byte is in staging
        self._in_flight.append(_InFlight(converted, arrays, event, staged, host))

    def oldest_ready(self) -> bool:
        """Whether the oldest batch in flight has been copied."""
        return self.backend.query(self._in_flight[0].event)

    def wait_oldest(self) -> None:
        """Block until the oldest batch in flight has been copied."""
        oldest = self._in_flight[0]
        if not self.backend.query(oldest.event):
            self._waits += 1
            self.backend.wait(oldest.event)

    def take(self) -> Any:
        """Hand over the oldest batch in flight, waiting for its copy if need be."""
        self.wait_oldest()
        done = self._in_flight.popleft()
        self._finish(done)
        self.backend.hand_over(done.arrays, done.event)
        self._batches += 1
        return done.batch

    def _recycle(self, staged: list[tuple[Key, Any]]) -> None:
        for key, buffer in staged:
            self.staging.give(key, buffer)

    def _finish(self, done: _InFlight) -> None:
        self._recycle(done.staged)
        done.staged = []
        if done.host is not None:
            host, done.host = done.host, None
            release_batch(host)

    def drain(self) -> None:
        """Wait for every copy in flight, then drop those batches (released, recycled)."""
        while self._in_flight:
            done = self._in_flight.popleft()
            self.backend.wait(done.event)
            self._finish(done)

    def close(self) -> None:
        """``drain``, then free the staging buffers and unregister host memory."""
        self.drain()
        self.staging.clear()
        self.registrations.close()

    def statistics(self) -> DeviceStatistics:
        """Counters and holdings at this moment."""
        return DeviceStatistics(
            batches=self._batches,
            host_waits=self._waits,
            copies=self._copies,
            direct_copies=self._direct,
            staging_allocations=self.staging.allocations,
            staging_reuses=self.staging.reuses,
            staging_held=self.staging.held,
            registrations=self.registrations.count,
            in_flight=len(self._in_flight),
        )


__all__ = ("DeviceBackend", "DeviceFeed", "DeviceStatistics", "Registrations", "StagingPool")
