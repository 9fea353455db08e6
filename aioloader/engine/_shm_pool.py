"""Recycled shared memory for batches built in worker processes.

A worker pickles its batch with protocol 5: every contiguous array leaves the pickle as an
out-of-band buffer and is copied into one of the worker's *segments*; the small pickle
travels through the pipe. The parent maps each segment once and unpickles the batch with
numpy views onto it, so a batch arrives as the same type with the same bytes.

Segments are anonymous files (``memfd_create`` on Linux): they have no name in
``/dev/shm`` at any moment, the worker passes the descriptor over its Unix socket
(``SCM_RIGHTS``), and the kernel frees the memory when the last process holding it exits,
however it exits (``SIGKILL`` included). Elsewhere on POSIX a named segment is unlinked
right after it is created, before any other process exists that could be killed in the
gap. A segment holds one batch at a time; when the parent lets go of it (``release()``, or
every view garbage-collected), the segment's number goes back to its worker with the next
job. The worker reuses the smallest free segment that fits, grows a free one when none
fits, and creates a segment only when none is free: segments number at most the batches
alive at once.
"""

from __future__ import annotations

import io
import mmap
import os
import pickle
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ..core import BatchState, BufferPool, PooledBatch, StepBatch

SEGMENT_PREFIX = "aioloader-shm"
"""Name of every segment (``/memfd:aioloader-shm`` in ``/proc/<pid>/fd``)."""
ALIGNMENT = 64
MIN_SEGMENT_BYTES = 1 << 16
_SKIPPED_SLOTS = frozenset({"pool", "buffers", "__weakref__", "__dict__"})
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_LOADING = threading.local()


def create_segment(nbytes: int) -> int:
    """A file descriptor of an anonymous shared-memory file of ``nbytes``."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(SEGMENT_PREFIX, os.MFD_CLOEXEC)
    else:  # pragma: no cover - POSIX without memfd (macOS): an unlinked temporary file
        import tempfile

        with tempfile.TemporaryFile(prefix=SEGMENT_PREFIX) as unnamed:
            fd = os.dup(unnamed.fileno())
    os.ftruncate(fd, nbytes)
    return fd


def segment_bytes(nbytes: int) -> int:
    """Size of a segment that holds ``nbytes``: a power of two, at least 64 KiB."""
    return max(MIN_SEGMENT_BYTES, 1 << max(0, nbytes - 1).bit_length())


def _field_names(kind: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(kind)
    if names is None:
        found: list[str] = []
        for klass in reversed(kind.__mro__):
            slots = klass.__dict__.get("__slots__", ())
            for name in (slots,) if isinstance(slots, str) else slots:
                if name not in _SKIPPED_SLOTS and name not in found:
                    found.append(name)
        names = _FIELD_NAMES[kind] = tuple(found)
    return names


def _rebuild_pooled(
    batch_type: type[PooledBatch[Any]], state_type: type[BatchState], fields: dict[str, Any]
) -> PooledBatch[Any]:
    """The parent's half of ``BatchPickler``: a pooled batch whose buffer is its segment."""
    state = state_type.__new__(state_type)
    BatchState.__init__(state)
    for name, value in fields.items():
        setattr(state, name, value)
    lease: SegmentLease | None = getattr(_LOADING, "lease", None)
    if lease is not None:
        lease.holders += 1
        state.pool, state.buffers = lease.returns, (_LOADING.slot,)
    batch = batch_type.__new__(batch_type)
    if isinstance(batch, StepBatch):
        StepBatch.__init__(batch, state)
    else:
        PooledBatch.__init__(batch, state)
    return batch


class BatchPickler(pickle.Pickler):
    """Pickles pooled batches by their fields (not their pool); arrays go out of band."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, PooledBatch):
            state = obj.live_state()
            names = _field_names(type(state))
            fields = {name: getattr(state, name) for name in names}
            fields.update(getattr(state, "__dict__", {}))
            return _rebuild_pooled, (type(obj), type(state), fields)
        return NotImplemented


class _Segment:
    __slots__ = ("fd", "map", "size")

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size
        self.map = mmap.mmap(fd, size)

    def grow(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        self.map.close()
        self.map = mmap.mmap(self.fd, size)
        self.size = size


class StoredBatch:
    """What a worker sends for one batch: where it lies and the pickle that describes it."""

    __slots__ = ("new_fd", "payload", "segment", "size", "spans")

    def __init__(
        self, segment: int, size: int, new_fd: int | None, payload: bytes, spans: list[int]
    ) -> None:
        self.segment, self.size, self.new_fd = segment, size, new_fd
        self.payload, self.spans = payload, spans


class WorkerArena:
    """The worker's segments: which are free, and writing a batch into one of them."""

    __slots__ = ("_free", "_segments")

    def __init__(self) -> None:
        self._segments: list[_Segment] = []
        self._free: set[int] = set()

    def free(self, segments: list[int]) -> None:
        """Segments the parent has let go of."""
        self._free.update(segments)

    def _allocate(self, nbytes: int) -> tuple[int, int | None]:
        free, segments = self._free, self._segments
        fitting = [k for k in free if segments[k].size >= nbytes]
        if fitting:
            chosen = min(fitting, key=lambda k: segments[k].size)
            free.discard(chosen)
            return chosen, None
        if free:
            chosen = max(free, key=lambda k: segments[k].size)
            free.discard(chosen)
            segments[chosen].grow(segment_bytes(nbytes))
            return chosen, None
        fd = create_segment(segment_bytes(nbytes))
        segments.append(_Segment(fd, segment_bytes(nbytes)))
        return len(segments) - 1, fd

    def store(self, batch: Any) -> StoredBatch:
        """Copy the arrays of ``batch`` into a free segment; describe the rest in a pickle."""
        buffers: list[pickle.PickleBuffer] = []
        sink = io.BytesIO()
        BatchPickler(sink, protocol=5, buffer_callback=buffers.append).dump(batch)
        raws = [buffer.raw() for buffer in buffers]
        spans: list[int] = []
        end = 0
        for raw in raws:
            spans += [end, raw.nbytes]
            end += -(-raw.nbytes // ALIGNMENT) * ALIGNMENT
        chosen, new_fd = self._allocate(max(end, 1))
        segment = self._segments[chosen]
        target = segment.map
        for k, raw in enumerate(raws):
            start = spans[2 * k]
            target[start : start + raw.nbytes] = raw
        for raw in raws:
            raw.release()
        return StoredBatch(chosen, segment.size, new_fd, sink.getvalue(), spans)

    @property
    def segments(self) -> int:
        """How many segments the worker has created."""
        return len(self._segments)


class SegmentReturns(BufferPool):
    """The ``pool`` of batches rebuilt in the parent: ``release`` gives back a segment."""

    __slots__ = ("_leases",)

    def __init__(self) -> None:
        super().__init__(max_bytes_held=0, max_objects_per_type=0)
        self._leases: dict[int, SegmentLease] = {}

    def lend(self, lease: SegmentLease) -> None:
        """Register ``lease`` so that ``release(lease.slot)`` finds it."""
        self._leases[lease.slot_id] = lease

    def release(self, array: npt.NDArray[Any]) -> None:
        """One pooled batch on the segment of ``array`` was released."""
        lease = self._leases.get(id(array))
        if lease is None or lease.slot() is not array:
            raise ValueError("array must be the segment of a batch built by a worker process")
        lease.holders -= 1
        if lease.holders <= 0:
            lease.give_back()

    def forget(self, lease: SegmentLease) -> None:
        """Drop ``lease`` from the registry (it was given back)."""
        if self._leases.get(lease.slot_id) is lease:
            del self._leases[lease.slot_id]

    def recycle(self, obj: object) -> None:
        """Batch states of rebuilt batches are not recycled."""


class SegmentLease:
    """One batch's hold on a segment; ``give_back`` runs once (release or garbage)."""

    __slots__ = (
        "_on_return",
        "_returned",
        "holders",
        "returns",
        "segment",
        "slot",
        "slot_id",
        "worker",
    )

    def __init__(
        self,
        returns: SegmentReturns,
        worker: int,
        segment: int,
        slot: npt.NDArray[np.uint8],
        on_return: Callable[[SegmentLease], None],
    ) -> None:
        self.returns, self.worker, self.segment = returns, worker, segment
        # Weak: the lease must not keep alive the array whose death gives the segment back.
        self.slot = weakref.ref(slot)
        self.slot_id = id(slot)
        self.holders = 0
        self._returned = False
        self._on_return = on_return

    def give_back(self) -> None:
        """Hand the segment back to its worker (idempotent)."""
        with _LEASE_LOCK:
            if self._returned:
                return
            self._returned = True
            self.returns.forget(self)
        self._on_return(self)


_LEASE_LOCK = threading.Lock()


class ParentSegments:
    """The parent's mappings of one worker's segments."""

    __slots__ = ("_fds", "_maps", "created")

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}
        self._maps: dict[int, mmap.mmap] = {}
        self.created = 0

    def attach(self, segment: int, fd: int) -> None:
        """Take ownership of the descriptor of a new segment."""
        self._fds[segment] = fd
        self.created += 1

    def view(self, segment: int, size: int) -> mmap.mmap:
        """The mapping of ``segment``, remapped if the worker grew it to ``size``."""
        mapped = self._maps.get(segment)
        if mapped is None or len(mapped) < size:
            # An older, smaller mapping stays alive while views of it do.
            mapped = self._maps[segment] = mmap.mmap(self._fds[segment], size)
        return mapped

    @property
    def bytes_mapped(self) -> int:
        """Bytes of the current mappings."""
        return sum(len(m) for m in self._maps.values())

    def close(self) -> None:
        """Close the descriptors; mappings go when the last view of them does."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._maps.clear()


def load_batch(
    stored: StoredBatch,
    mapping: mmap.mmap,
    returns: SegmentReturns,
    worker: int,
    on_return: Callable[[SegmentLease], None],
) -> tuple[Any, SegmentLease]:
    """Rebuild a stored batch in the parent: arrays are views onto ``mapping``."""
    spans = stored.spans
    total = spans[-2] + spans[-1] if spans else 0
    slot: npt.NDArray[np.uint8] = np.frombuffer(mapping, np.uint8, count=max(total, 1))
    lease = SegmentLease(returns, worker, stored.segment, slot, on_return)
    views = [slot[spans[k] : spans[k] + spans[k + 1]] for k in range(0, len(spans), 2)]
    _LOADING.lease, _LOADING.slot = lease, slot
    try:
        batch = pickle.loads(stored.payload, buffers=views)
    finally:
        _LOADING.lease = _LOADING.slot = None
    returns.lend(lease)
    # Whatever the batch type, the segment comes back once no view of it is left.
    weakref.finalize(slot, lease.give_back).atexit = False
    return batch, lease


IS_POSIX = os.name == "posix" and sys.platform not in ("emscripten", "wasi")

__all__ = [
    "SEGMENT_PREFIX",
    "BatchPickler",
    "ParentSegments",
    "SegmentLease",
    "SegmentReturns",
    "StoredBatch",
    "WorkerArena",
    "create_segment",
    "load_batch",
    "segment_bytes",
]
