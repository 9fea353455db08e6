"""A thread-safe pool of numpy buffers and batch objects (docs/contract.md, "Memory").

Buffers come from power-of-two byte size classes: a request for ``n`` bytes is served by a
raw buffer of ``max(64, 2^ceil(log2 n))`` bytes, handed out as a view of the asked shape and
dtype. ``release`` puts it back. Outstanding buffers are tracked by weak reference, so an
array that is dropped without ``release`` is simply garbage collected (a later miss).

Batches built from pooled buffers derive from ``PooledBatch``: ``release()`` (or leaving
``with batch:``) returns their buffers and recycles their internal state object; any field
read after that raises ``BufferReleasedError`` instead of showing a newer batch's data.
``PooledBatch.export(array)`` gives a view that keeps the batch's buffers out of the pool,
even after ``release()``, until the view is garbage-collected: the interop modules hand
such views to torch (``torch.from_numpy`` keeps its array alive as long as any tensor
shares the memory), so a tensor the user keeps is never overwritten by a later batch.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

import numpy as np
import numpy.typing as npt

from .._errors import BufferReleasedError
from ._check import as_int

MIN_CLASS_BYTES = 64
_RELEASE_LOCK = threading.Lock()
_T = TypeVar("_T")
_B = TypeVar("_B", bound="PooledBatch[Any]")
_V = TypeVar("_V")
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


@dataclass(frozen=True, slots=True)
class PoolStatistics:
    """A snapshot of a ``BufferPool``.

    Attributes:
        hits: Acquisitions served from a held buffer.
        misses: Acquisitions that allocated a new buffer.
        bytes_held: Bytes of the free buffers the pool holds (by size class).
        buffers_held: Number of free buffers the pool holds.
        buffers_out: Buffers acquired, not yet released and still alive.
    """

    hits: int
    misses: int
    bytes_held: int
    buffers_held: int
    buffers_out: int


def size_class(nbytes: int) -> int:
    """Bytes of the raw buffer that serves a request of ``nbytes``.

    >>> size_class(0), size_class(65), size_class(4096), size_class(4097)
    (64, 128, 4096, 8192)
    """
    if nbytes <= MIN_CLASS_BYTES:
        return MIN_CLASS_BYTES
    return 1 << (nbytes - 1).bit_length()


def _check_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise TypeError(
            f"shape must be an int or a tuple of ints but got {type(shape).__name__} ({shape!r})"
        )
    dims = tuple(as_int(f"shape[{k}]", d) for k, d in enumerate(shape))
    for k, d in enumerate(dims):
        if d < 0:
            raise ValueError(f"shape[{k}] must be >= 0 but got {d}")
    return dims


class BufferPool:
    """Numpy arrays from power-of-two size classes; safe to share between threads.

    Args:
        max_bytes_held: Upper bound on the bytes of free buffers kept; a released buffer
            that would exceed it is dropped. ``None`` keeps everything.
        max_objects_per_type: How many recycled batch objects are kept per type.

    >>> pool = BufferPool()
    >>> a = pool.acquire((2, 3), np.float32)
    >>> pool.release(a)
    >>> b = pool.acquire((6,), np.float32)   # same 64-byte class: a hit
    >>> pool.statistics().hits
    1
    """

    __slots__ = (
        "_buffers_held",
        "_bytes_held",
        "_free",
        "_hits",
        "_lock",
        "_max_bytes_held",
        "_max_objects",
        "_misses",
        "_objects",
        "_out",
        "_prune_mark",
    )

    def __init__(self, max_bytes_held: int | None = None, max_objects_per_type: int = 64) -> None:
        if max_bytes_held is not None:
            max_bytes_held = as_int("max_bytes_held", max_bytes_held)
            if max_bytes_held < 0:
                raise ValueError(f"max_bytes_held must be >= 0 or None but got {max_bytes_held}")
        self._max_bytes_held = max_bytes_held
        self._max_objects = as_int("max_objects_per_type", max_objects_per_type)
        if self._max_objects < 0:
            raise ValueError(f"max_objects_per_type must be >= 0 but got {self._max_objects}")
        self._lock = threading.Lock()
        self._free: dict[int, list[npt.NDArray[Any]]] = {}
        self._out: dict[int, weakref.ref[npt.NDArray[Any]]] = {}
        self._objects: dict[type, list[object]] = {}
        self._hits = 0
        self._misses = 0
        self._bytes_held = 0
        self._buffers_held = 0
        self._prune_mark = 256

    def __reduce__(self) -> tuple[Any, ...]:
        """A pool pickles as an empty pool with the same limits (its buffers are a cache).

        So a collator that holds one can be sent to a worker process.
        """
        return (BufferPool, (self._max_bytes_held, self._max_objects))

    def acquire(self, shape: Any, dtype: npt.DTypeLike) -> npt.NDArray[Any]:
        """An uninitialised C-contiguous array of ``shape`` and ``dtype`` (contents arbitrary)."""
        dims = _check_shape(shape)
        kind = np.dtype(dtype)
        if kind.hasobject:
            raise TypeError(f"dtype must not hold Python objects but got {kind}")
        count = 1
        for d in dims:
            count *= d
        klass = size_class(count * kind.itemsize)
        with self._lock:
            free = self._free.get(klass)
            previous = free.pop() if free else None
            if previous is not None:
                self._hits += 1
                self._bytes_held -= klass
                self._buffers_held -= 1
            else:
                self._misses += 1
        if previous is None:
            array: npt.NDArray[Any] = np.ndarray(dims, kind, buffer=np.empty(klass, np.uint8))
        elif previous.shape == dims and previous.dtype == kind:
            array = previous
        else:
            array = np.ndarray(dims, kind, buffer=previous.base)
        ref = weakref.ref(array)
        with self._lock:
            self._out[id(array)] = ref
            if len(self._out) > self._prune_mark:
                self._prune()
        return array

    def release(self, array: npt.NDArray[Any]) -> None:
        """Give back an array returned by ``acquire``; it must not be used afterwards."""
        with self._lock:
            ref = self._out.get(id(array))
            if ref is None or ref() is not array:
                raise ValueError(
                    "array must be one acquired from this pool and not yet released but got "
                    f"an array of shape {getattr(array, 'shape', '?')} that is not out"
                )
            del self._out[id(array)]
            klass = size_class(array.nbytes)
            if self._max_bytes_held is not None and self._bytes_held + klass > self._max_bytes_held:
                return
            self._free.setdefault(klass, []).append(array)
            self._bytes_held += klass
            self._buffers_held += 1

    def _prune(self) -> None:
        dead = [key for key, ref in self._out.items() if ref() is None]
        for key in dead:
            del self._out[key]
        self._prune_mark = max(256, 2 * len(self._out))

    def recycle(self, obj: object) -> None:
        """Keep ``obj`` for ``reuse(type(obj))`` (up to ``max_objects_per_type`` per type)."""
        with self._lock:
            kept = self._objects.setdefault(type(obj), [])
            if len(kept) < self._max_objects:
                kept.append(obj)

    def reuse(self, kind: type[_T]) -> _T | None:
        """A recycled object of exactly type ``kind``, or ``None``."""
        with self._lock:
            kept = self._objects.get(kind)
            if kept:
                obj = kept.pop()
                assert type(obj) is kind
                return obj
        return None

    def clear(self) -> None:
        """Drop every free buffer and recycled object (outstanding buffers are unaffected)."""
        with self._lock:
            self._free.clear()
            self._objects.clear()
            self._bytes_held = 0
            self._buffers_held = 0

    def statistics(self) -> PoolStatistics:
        """Counters and holdings at this moment."""
        with self._lock:
            self._prune()
            return PoolStatistics(
                hits=self._hits,
                misses=self._misses,
                bytes_held=self._bytes_held,
                buffers_held=self._buffers_held,
                buffers_out=len(self._out),
            )

    def __repr__(self) -> str:
        s = self.statistics()
        return (
            f"BufferPool(hits={s.hits}, misses={s.misses}, bytes_held={s.bytes_held}, "
            f"buffers_held={s.buffers_held}, buffers_out={s.buffers_out})"
        )


class BatchState:
    """The recyclable inside of a pooled batch: its pool and the buffers to give back.

    A subclass adds its fields in ``clear()`` (calling ``super().clear()``): a new state
    starts cleared, and a recycled one is cleared the same way.
    """

    __slots__ = ("buffers", "pool")

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget every reference (called before the object is recycled)."""
        self.pool: BufferPool | None = None
        self.buffers: tuple[npt.NDArray[Any], ...] = ()


StateT = TypeVar("StateT", bound=BatchState)


class PooledBatch(Generic[StateT]):
    """A thin handle on a batch whose arrays may come from a ``BufferPool``.

    The handle is never reused: after ``release()`` it raises ``BufferReleasedError`` on
    every field read, while its state object and buffers serve later batches.
    """

    __slots__ = ("_exports", "_held", "_state")

    def __init__(self, state: StateT) -> None:
        self._state: StateT | None = state
        self._exports = 0
        self._held: tuple[BufferPool | None, tuple[npt.NDArray[Any], ...]] | None = None

    def live_state(self) -> StateT:
        """The state behind the fields; ``BufferReleasedError`` once released."""
        state = self._state
        if state is None:
            raise BufferReleasedError(
                f"this {type(self).__name__} was released and its buffers went back to the "
                "pool; read or copy its fields before release() or the end of `with batch:`"
            )
        return state

    @property
    def released(self) -> bool:
        """Whether ``release()`` has been called."""
        return self._state is None

    def release(self) -> None:
        """Return the buffers to the pool and recycle the state object; idempotent.

        Buffers that an exported view still shares (``export``) go back only once the
        last such view is garbage-collected.
        """
        with _RELEASE_LOCK:
            state = self._state
            if state is None:
                return
            self._state = None
            pool, buffers = state.pool, state.buffers
            deferred = self._exports > 0
            if deferred:
                self._held = (pool, buffers)
        state.clear()
        if pool is not None:
            if not deferred:
                for buffer in buffers:
                    pool.release(buffer)
            pool.recycle(state)

    def export(self, array: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """A new view of ``array`` (one of this batch's fields) that keeps the batch valid.

        Until the view is garbage-collected, ``release()`` keeps the batch's buffers out
        of its pool, so no later batch is built into the memory the view shows. Give the
        view to code that holds on to it while it reads the memory, as
        ``torch.from_numpy`` does for every tensor that shares it.

        >>> batch = PooledBatch(BatchState())
        >>> view = batch.export(np.zeros(3))
        >>> batch.release()   # the view still reads its own bytes
        >>> view.tolist()
        [0.0, 0.0, 0.0]
        """
        self.live_state()
        view: npt.NDArray[Any] = array.view()
        with _RELEASE_LOCK:
            self._exports += 1
        weakref.finalize(view, self._export_collected).atexit = False
        return view

    def _export_collected(self) -> None:
        with _RELEASE_LOCK:
            self._exports -= 1
            held = self._held if self._exports == 0 else None
            if held is not None:
                self._held = None
        if held is not None:
            pool, buffers = held
            if pool is not None:
                for buffer in buffers:
                    pool.release(buffer)

    def __enter__(self: _B) -> _B:
        self.live_state()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class BatchField(Generic[_V]):
    """A read-only field of a ``PooledBatch``, read from its live state (same name)."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> BatchField[_V]: ...

    @overload
    def __get__(self, obj: PooledBatch[Any], owner: type | None = None) -> _V: ...

    def __get__(self, obj: PooledBatch[Any] | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(obj.live_state(), self._name)


class StepState(BatchState):
    """The state of a batch that knows its step: ``global_step``, ``epoch`` and ``step``."""

    __slots__ = ("epoch", "global_step", "step")

    def clear(self) -> None:
        """Forget every reference and the step."""
        super().clear()
        self.global_step = self.epoch = self.step = 0

    def stamp(self, plan: Any) -> None:
        """Record the position of ``plan`` (a ``BatchPlan``)."""
        self.global_step, self.epoch, self.step = plan.global_step, plan.epoch, plan.step


StepStateT = TypeVar("StepStateT", bound=StepState)


class StepBatch(PooledBatch[StepStateT]):
    """A pooled batch that knows where it sits in the stream (every collator's batches).

    ``global_step``, ``epoch`` and ``step`` hold no pooled memory and stay readable after
    ``release()``; every other field raises ``BufferReleasedError`` then.
    """

    __slots__ = ("_position",)

    DIGEST_FIELDS: tuple[str, ...] = ("global_step",)
    """The fields ``digest_batch`` reads, in this order."""

    STEP_FIELDS: tuple[str, ...] = ("global_step", "epoch", "step")

    def __init__(self, state: StepStateT) -> None:
        super().__init__(state)
        self._position: tuple[int, int, int] | None = None

    def _where(self, index: int) -> int:
        state = self._state
        if state is not None:
            return int(getattr(state, self.STEP_FIELDS[index]))
        position = self._position
        if position is None:
            self.live_state()  # raises: released before its position was recorded
        assert position is not None
        return int(position[index])

    @property
    def global_step(self) -> int:
        """The global step of the batch."""
        return self._where(0)

    @property
    def epoch(self) -> int:
        """Epoch of the batch."""
        return self._where(1)

    @property
    def step(self) -> int:
        """Step in the epoch."""
        return self._where(2)

    def release(self) -> None:
        """Return the buffers to the pool (the step fields stay readable); idempotent."""
        state = self._state
        if state is not None and self._position is None:
            self._position = (state.global_step, state.epoch, state.step)
        super().release()

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Every field of the batch type: its array fields, then the step fields."""
        known = _FIELD_NAMES.get(cls)
        if known is not None:
            return known
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if isinstance(value, BatchField) and name not in names:
                    names.append(name)
        known = _FIELD_NAMES[cls] = (*names, *cls.STEP_FIELDS)
        return known

    def __digest_fields__(self) -> list[tuple[str, Any]]:
        """``(name, value)`` of every field in ``DIGEST_FIELDS``, for ``digest_batch``."""
        state = self.live_state()
        return [(name, getattr(state, name)) for name in self.DIGEST_FIELDS]

    def __batch_fields__(self) -> list[tuple[str, Any]]:
        """``(name, value)`` of every field, for the interop modules (nothing dropped)."""
        state = self.live_state()
        return [(name, getattr(state, name)) for name in self.field_names()]


def release_batch(batch: Any) -> None:
    """Return a batch's pooled buffers if it has any (``batch.release()``); else nothing.

    >>> release_batch([1, 2])  # not pooled: left alone
    """
    release = getattr(batch, "release", None)
    if callable(release):
        release()


__all__ = (
    "BatchField",
    "BatchState",
    "BufferPool",
    "PoolStatistics",
    "PooledBatch",
    "StepBatch",
    "StepState",
    "release_batch",
    "size_class",
)
