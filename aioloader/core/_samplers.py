"""Samplers: pure functions ``indices(seed, epoch, step) -> int64 array`` (docs/samplers.md).

Every sampler is immutable after construction and safe to call from any thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar, cast, runtime_checkable

import numpy as np
import numpy.typing as npt

from ._check import (
    U64_LIMIT,
    as_int,
    batch_size_arg,
    finite_non_negative,
    flag,
    int_in_range,
    positive_int,
    sequence_1d,
    u64,
)
from ._identity import values_digest
from ._permutation import keyed_permutation_array
from ._rng import (
    GOLDEN,
    MASK64,
    SampleRng,
    _derive_unchecked,
    derive_slots,
    mix_array,
)
from ._streams import RngStream

IndexArray = npt.NDArray[np.int64]
INDEX_LIMIT = 1 << 63

T = TypeVar("T")


@runtime_checkable
class Sampler(Protocol):
    """What the loader needs from a sampler."""

    @property
    def steps_per_epoch(self) -> int:
        """Number of steps (batches) in one epoch."""
        ...

    def indices(self, seed: int, epoch: int, step: int) -> IndexArray:
        """Dataset indices of the batch at ``(epoch, step)``."""
        ...


def _check_position(seed: Any, epoch: Any, step: Any, steps_per_epoch: int) -> tuple[int, int, int]:
    if (
        type(seed) is int
        and type(epoch) is int
        and type(step) is int
        and 0 <= seed < U64_LIMIT
        and 0 <= epoch < U64_LIMIT
        and 0 <= step < steps_per_epoch
    ):
        return seed, epoch, step  # what the engine passes: no call to check it
    seed_value = u64("seed", seed)
    epoch_value = u64("epoch", epoch)
    step_value = as_int("step", step)
    if steps_per_epoch == 0:
        raise ValueError(
            "step must be in [0, steps_per_epoch) but steps_per_epoch is 0 "
            "(fewer items than one batch with drop_last)"
        )
    if not 0 <= step_value < steps_per_epoch:
        raise ValueError(
            f"step must be an integer in [0, steps_per_epoch) = [0, {steps_per_epoch}) "
            f"but got {step_value}"
        )
    return seed_value, epoch_value, step_value


def batches_in(items: int, per_batch: int, drop_last: bool) -> int:
    """Batches of ``per_batch`` that ``items`` make: the short last one counts unless dropped."""
    full, rest = divmod(items, per_batch)
    return full if drop_last or rest == 0 else full + 1


def check_sampler(sampler: Any, *, needs_a_step: bool = True) -> Sampler:
    """``sampler`` if it has ``steps_per_epoch`` and ``indices(seed, epoch, step)``.

    With ``needs_a_step`` (the default) also ``steps_per_epoch >= 1``; a clear error otherwise.
    """
    if not callable(getattr(sampler, "indices", None)) or not hasattr(sampler, "steps_per_epoch"):
        raise TypeError(
            "sampler must have steps_per_epoch and indices(seed, epoch, step) "
            f"but got {type(sampler).__name__}"
        )
    if needs_a_step and sampler.steps_per_epoch < 1:
        raise ValueError(
            f"sampler has steps_per_epoch = {sampler.steps_per_epoch}: fewer items than one batch"
        )
    return cast(Sampler, sampler)


class _FixedBatches:
    """What the samplers of one batch size share: ``batch_size`` and ``steps_per_epoch``.

    Subclasses set ``_batch_size`` and ``_steps``; each class's docstring says how many
    steps an epoch has.
    """

    __slots__ = ("_batch_size", "_steps")
    _batch_size: int
    _steps: int

    @property
    def batch_size(self) -> int:
        """Items per full batch (on each rank, for a sharding sampler)."""
        return self._batch_size

    @property
    def steps_per_epoch(self) -> int:
        """Steps (batches) in one epoch, the same in every epoch."""
        return self._steps


class _PositionalSampler(_FixedBatches):
    """Shared shape of Sequential, Shuffled and BlockShuffled: epoch positions cut into batches."""

    __slots__ = ("_drop_last", "_n")

    def __init__(self, n: int, batch_size: int, drop_last: bool = True) -> None:
        self._n = positive_int("n", n, INDEX_LIMIT)
        self._batch_size = batch_size_arg(batch_size)
        self._drop_last = flag("drop_last", drop_last)
        self._steps = batches_in(self._n, self._batch_size, drop_last)

    @property
    def n(self) -> int:
        """Number of items in the dataset."""
        return self._n

    @property
    def drop_last(self) -> bool:
        """Whether the short last batch is dropped."""
        return self._drop_last

    def _positions(self, step: int) -> IndexArray:
        start = step * self._batch_size
        stop = min(start + self._batch_size, self._n)
        return np.arange(start, stop, dtype=np.int64)

    def fingerprint_fields(self) -> dict[str, Any]:
        """What decides the stream, for the checkpoint's fingerprint (JSON data)."""
        return {"n": self._n, "batch_size": self._batch_size, "drop_last": self._drop_last}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n={self._n}, batch_size={self._batch_size}, "
            f"drop_last={self._drop_last})"
        )


class SequentialSampler(_PositionalSampler):
    """Slot ``i`` of step ``s`` is index ``s * batch_size + i``.

    An epoch has ``n // batch_size`` steps with ``drop_last``, else ``ceil(n / batch_size)``.

    >>> SequentialSampler(10, 3, drop_last=False).indices(0, 0, 3).tolist()
    [9]
    """

    __slots__ = ()

    def indices(self, seed: int, epoch: int, step: int) -> IndexArray:
        """Indices of ``(epoch, step)``; the seed is checked but does not change them."""
        _, _, step_value = _check_position(seed, epoch, step, self._steps)
        return self._positions(step_value)


class ShuffledSampler(_PositionalSampler):
    """Slot ``i`` of step ``s`` is ``perm(s*B + i, n, derive(seed, epoch, 0, 0, 101))``.

    Each epoch is a fresh permutation with no table of the epoch: any ``n < 2^63``, and the
    memory held is the same whatever ``n``. The order is computed a span of ``SPAN``
    positions at a time (one array call) and the last span kept, so the next steps of
    that span cost a slice; the values are those of ``perm``.
    An epoch has ``n // batch_size`` steps with ``drop_last``, else ``ceil(n / batch_size)``.
    """

    __slots__ = ("_lock", "_span")

    SPAN = 1 << 13
    """Positions computed at once and kept (64 KiB of int64); a larger batch is one span."""

    def __init__(self, n: int, batch_size: int, drop_last: bool = True) -> None:
        super().__init__(n, batch_size, drop_last)
        self._lock = threading.Lock()
        self._span: tuple[int, int, int, IndexArray] | None = None

    def _span_order(self, seed: int, epoch: int, span: int, steps_per_span: int) -> IndexArray:
        cached = self._span
        if cached is not None and cached[:3] == (seed, epoch, span):
            return cached[3]
        with self._lock:
            cached = self._span
            if cached is None or cached[:3] != (seed, epoch, span):
                first = span * steps_per_span * self._batch_size
                stop = min(first + steps_per_span * self._batch_size, self._n)
                key = _derive_unchecked(seed, epoch, 0, 0, RngStream.SHUFFLE)
                positions = np.arange(first, stop, dtype=np.uint64)
                order = keyed_permutation_array(positions, self._n, key).view(np.int64)
                order.flags.writeable = False
                cached = self._span = (seed, epoch, span, order)
        return cached[3]

    def indices(self, seed: int, epoch: int, step: int) -> IndexArray:
        """Indices of ``(epoch, step)`` under the epoch's keyed permutation."""
        seed_value, epoch_value, step_value = _check_position(seed, epoch, step, self._steps)
        steps_per_span = max(1, self.SPAN // self._batch_size)
        span, offset = divmod(step_value, steps_per_span)
        order = self._span_order(seed_value, epoch_value, span, steps_per_span)
        start = offset * self._batch_size
        return cast(IndexArray, order[start : start + self._batch_size].copy())

    def __getstate__(self) -> tuple[int, int, bool]:
        return (self._n, self._batch_size, self._drop_last)

    def __setstate__(self, state: tuple[int, int, bool]) -> None:
        self.__init__(*state)  # type: ignore[misc]


class MixingSampler(_FixedBatches):
    """Draws each slot from one of several sources laid end to end, by share, with replacement.

    Slot ``j`` of step ``s``: ``rng = SampleRng(derive(seed, e, s, j, 102))``; the first
    ``next_double`` picks the source by cumulative normalised share, then
    ``start[k] + rng.next_int(sizes[k])`` picks the item.
    An epoch has ``steps_per_epoch`` steps (default ``max(1, sum(sizes) // batch_size)``).
    """

    __slots__ = ("_bounds", "_eligible", "_shares", "_sizes", "_starts")

    def __init__(
        self,
        sizes: Sequence[int],
        shares: Sequence[float],
        batch_size: int,
        steps_per_epoch: int | None = None,
    ) -> None:
        sizes = sequence_1d("sizes", sizes, "integers")
        shares = sequence_1d("shares", shares, "numbers")
        self._sizes = tuple(
            int_in_range(f"sizes[{k}]", s, 0, INDEX_LIMIT) for k, s in enumerate(sizes)
        )
        self._shares = tuple(finite_non_negative(f"shares[{k}]", s) for k, s in enumerate(shares))
        if len(self._sizes) != len(self._shares):
            raise ValueError(
                f"sizes and shares must have the same length but got {len(self._sizes)} "
                f"and {len(self._shares)}"
            )
        if sum(self._sizes) >= INDEX_LIMIT:
            raise ValueError(f"sum(sizes) must be < 2^63 but got {sum(self._sizes)}")
        self._batch_size = batch_size_arg(batch_size)
        self._eligible = tuple(
            k
            for k, (size, share) in enumerate(zip(self._sizes, self._shares, strict=True))
            if size > 0 and share > 0
        )
        if not self._eligible:
            raise ValueError(
                "sizes and shares must give at least one source with size > 0 and share > 0 "
                "but got "
                f"sizes={list(self._sizes)} shares={list(self._shares)}"
            )
        total = 0.0
        for k in self._eligible:
            total += self._shares[k]
        cumulative, bounds = 0.0, []
        for k in self._eligible:
            cumulative += self._shares[k] / total
            bounds.append(cumulative)
        self._bounds = np.array(bounds, dtype=np.float64)
        starts, offset = [], 0
        for size in self._sizes:
            starts.append(offset)
            offset += size
        self._starts = tuple(starts)
        if steps_per_epoch is None:
            self._steps = max(1, sum(self._sizes) // self._batch_size)
        else:
            self._steps = positive_int("steps_per_epoch", steps_per_epoch, U64_LIMIT)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Items in each source."""
        return self._sizes

    @property
    def shares(self) -> tuple[float, ...]:
        """Relative share of each source."""
        return self._shares

    def indices(self, seed: int, epoch: int, step: int) -> IndexArray:
        """Indices of ``(epoch, step)``: one independent draw per slot."""
        seed_value, epoch_value, step_value = _check_position(seed, epoch, step, self._steps)
        states = derive_slots(
            seed_value, epoch_value, step_value, self._batch_size, RngStream.MIXING
        )
        first = mix_array(states)
        u = (first >> np.uint64(11)).astype(np.float64) * 2.0**-53
        pick = np.searchsorted(self._bounds, u, side="right")
        pick = np.minimum(pick, len(self._eligible) - 1)
        eligible = np.array(self._eligible, dtype=np.int64)
        source = eligible[pick]
        sizes = np.array(self._sizes, dtype=np.uint64)[source]
        starts = np.array(self._starts, dtype=np.int64)[source]
        second = mix_array(states + np.uint64(GOLDEN))
        high, low = _mul_high_low(second, sizes)
        offsets = high.astype(np.int64)
        for lane in np.flatnonzero(low < sizes):
            rng = SampleRng((int(states[lane]) + GOLDEN) & MASK64)
            offsets[lane] = rng.next_int(int(sizes[lane]))
        return cast(IndexArray, starts + offsets)

    def fingerprint_fields(self) -> dict[str, Any]:
        """What decides the stream, for the checkpoint's fingerprint (JSON data)."""
        return {
            "sizes": list(self._sizes),
            "shares": list(self._shares),
            "batch_size": self._batch_size,
            "steps_per_epoch": self._steps,
        }

    def __repr__(self) -> str:
        return (
            f"MixingSampler(sizes={list(self._sizes)}, shares={list(self._shares)}, "
            f"batch_size={self._batch_size}, steps_per_epoch={self._steps})"
        )


def _mul_high_low(
    a: npt.NDArray[np.uint64], b: npt.NDArray[np.uint64]
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """Full 128-bit product of uint64 lanes, as (high, low) halves."""
    lo32 = np.uint64(0xFFFFFFFF)
    a_lo, a_hi = a & lo32, a >> np.uint64(32)
    b_lo, b_hi = b & lo32, b >> np.uint64(32)
    ll = a_lo * b_lo
    lh = a_lo * b_hi
    hl = a_hi * b_lo
    hh = a_hi * b_hi
    middle = (ll >> np.uint64(32)) + (lh & lo32) + (hl & lo32)
    high = hh + (lh >> np.uint64(32)) + (hl >> np.uint64(32)) + (middle >> np.uint64(32))
    low = a * b
    return high, low


class RecentEpochs(Generic[T]):
    """What a sampler precomputes per ``(seed, epoch)``, kept for the ``limit`` latest.

    Thread-safe; two threads asking for a new epoch at once may both build it (the values
    are equal, one is kept).
    """

    __slots__ = ("_build", "_entries", "_limit", "_lock")

    def __init__(self, build: Callable[[int, int], T], limit: int = 2) -> None:
        self._build = build
        self._limit = limit
        self._entries: OrderedDict[tuple[int, int], T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, seed: int, epoch: int) -> T:
        """The value of ``(seed, epoch)``, built on first use."""
        key = (seed, epoch)
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None:
                self._entries.move_to_end(key)
                return cached
        value = self._build(seed, epoch)
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self._limit:
                self._entries.popitem(last=False)
        return value


class BucketedSampler(_FixedBatches):
    """Batches of similar length in a random order (docs/samplers.md).

    For epoch ``e`` the first ``S*B`` positions of a keyed shuffle (all ``n`` with
    ``drop_last=False``) are cut into pools of ``B * pool_batches``, each pool sorted by
    ``(length << 32) | index``, cut into batches (the last one short without
    ``drop_last``), and batch ``t`` served at step ``perm(t, S, derive(seed, e, 1, 0, 104))``.
    An epoch's plan costs O(n log n); the plans of the two most recent epochs (per seed)
    are cached.
    An epoch has ``len(lengths) // batch_size`` steps, rounded up without ``drop_last``.
    """

    __slots__ = ("_drop_last", "_epochs", "_lengths", "_pool_batches")

    def __init__(
        self, lengths: Any, batch_size: int, pool_batches: int, drop_last: bool = True
    ) -> None:
        self._lengths = _check_lengths(lengths)
        n = int(self._lengths.shape[0])
        self._batch_size = batch_size_arg(batch_size)
        self._pool_batches = positive_int("pool_batches", pool_batches, INDEX_LIMIT)
        self._drop_last = flag("drop_last", drop_last)
        self._steps = batches_in(n, self._batch_size, drop_last)
        self._epochs = RecentEpochs(self._build_plan)

    @property
    def lengths(self) -> npt.NDArray[np.uint32]:
        """Lengths of the items (a read-only array)."""
        return self._lengths

    @property
    def pool_batches(self) -> int:
        """Batches per sorting pool."""
        return self._pool_batches

    @property
    def drop_last(self) -> bool:
        """Whether the last partial batch is dropped (the default)."""
        return self._drop_last

    def indices(self, seed: int, epoch: int, step: int) -> IndexArray:
        """Indices of ``(epoch, step)``, sorted by (length, index) within the batch."""
        seed_value, epoch_value, step_value = _check_position(seed, epoch, step, self._steps)
        flat, short_step = self._epochs.get(seed_value, epoch_value)
        if short_step is None:
            return cast(IndexArray, flat[step_value].astype(np.int64))
        batch = self._batch_size
        start = step_value * batch
        if step_value > short_step:
            start -= batch - (flat.shape[0] - (self._steps - 1) * batch)
        size = batch
        if step_value == short_step:
            size = flat.shape[0] - (self._steps - 1) * batch
        return cast(IndexArray, flat[start : start + size].astype(np.int64))

    def epoch_plan(self, seed: int, epoch: int) -> npt.NDArray[np.uint32]:
        """The whole epoch as a read-only ``[steps_per_epoch, batch_size]`` array of indices.

        With ``drop_last=False`` and a short last batch, the flat read-only array of the
        epoch's ``n`` indices in the order they are served.
        """
        return self._epochs.get(u64("seed", seed), u64("epoch", epoch))[0]

    def _build_plan(self, seed: int, epoch: int) -> tuple[npt.NDArray[np.uint32], int | None]:
        n, batch, steps = int(self._lengths.shape[0]), self._batch_size, self._steps
        if steps == 0:
            raise ValueError("steps_per_epoch is 0 (fewer items than one batch)")
        count = min(n, steps * batch)
        order_key = _derive_unchecked(seed, epoch, 0, 0, RngStream.BUCKET_ORDER)
        order = keyed_permutation_array(np.arange(count, dtype=np.uint64), n, order_key)
        keys = (self._lengths[order].astype(np.uint64) << np.uint64(32)) | order
        pool = batch * self._pool_batches
        full = (keys.shape[0] // pool) * pool
        if full:
            keys[:full] = np.sort(keys[:full].reshape(-1, pool), axis=1).ravel()
        keys[full:].sort()
        ordered = (keys & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        place_key = _derive_unchecked(seed, epoch, 1, 0, RngStream.BUCKET_PLACE)
        step_of_batch = keyed_permutation_array(np.arange(steps, dtype=np.uint64), steps, place_key)
        whole = count // batch  # full batches: all but a short last one
        served = np.empty(steps, dtype=np.int64)  # served[step] = sorted batch t
        served[step_of_batch.astype(np.int64)] = np.arange(steps)
        rows = ordered[: whole * batch].reshape(whole, batch)
        if whole == steps:
            flat = rows[served]  # [steps, batch]
            short_step = None
        else:
            short_step = int(step_of_batch[steps - 1])
            flat = np.concatenate(
                [
                    rows[served[:short_step]].ravel(),
                    ordered[whole * batch :],
                    rows[served[short_step + 1 :]].ravel(),
                ]
            )
        flat.flags.writeable = False
        return cast(npt.NDArray[np.uint32], flat), short_step

    def fingerprint_fields(self) -> dict[str, Any]:
        """What decides the stream, for the checkpoint's fingerprint (JSON data)."""
        return {
            "n": int(self._lengths.shape[0]),
            "lengths": values_digest(self._lengths),
            "batch_size": self._batch_size,
            "pool_batches": self._pool_batches,
            "drop_last": self._drop_last,
        }

    def __repr__(self) -> str:
        drop = "" if self._drop_last else ", drop_last=False"  # version-2 states stay valid
        return (
            f"BucketedSampler(n={self._lengths.shape[0]}, batch_size={self._batch_size}, "
            f"pool_batches={self._pool_batches}{drop})"
        )


def _check_lengths(lengths: Any) -> npt.NDArray[np.uint32]:
    if isinstance(lengths, (str, bytes)):
        raise TypeError("lengths must be a sequence of integers but got a string")
    array = np.asarray(lengths)
    if array.ndim != 1:
        raise ValueError(f"lengths must be one-dimensional but got shape {array.shape}")
    if array.size == 0:
        raise ValueError("lengths must hold at least one item but got an empty sequence")
    if array.dtype.kind not in "ui":
        raise TypeError(f"lengths must hold integers but got dtype {array.dtype}")
    if array.shape[0] >= 1 << 32:
        raise ValueError(f"len(lengths) must be < 2^32 but got {array.shape[0]}")
    low, high = int(array.min()), int(array.max())
    if low < 0 or high >= 1 << 32:
        bad = low if low < 0 else high
        raise ValueError(f"lengths must be integers in [0, 2^32) but got {bad}")
    result = array.astype(np.uint32)
    result.flags.writeable = False
    return result


__all__ = (
    "BucketedSampler",
    "MixingSampler",
    "Sampler",
    "SequentialSampler",
    "ShuffledSampler",
    "check_sampler",
)
