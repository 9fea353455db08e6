"""WeightedRandomSampler: indices drawn in proportion to per-item weights (docs/samplers.md).

A pure function of ``(seed, epoch, step)`` like every sampler. With replacement each slot
is an independent draw through the weights' cumulative sums; without replacement an epoch
is the order of the exponential keys ``-ln(u_i) / w_i`` (Efraimidis and Spirakis), which
is sequential draws without replacement. The logarithm is a fixed polynomial of basic
float64 operations, so the keys, and the batches, are the same on every platform.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ._check import batch_size_arg, flag, positive_int, u64
from ._identity import values_digest
from ._rng import GOLDEN, derive, derive_slots, mix_array
from ._samplers import INDEX_LIMIT, IndexArray, RecentEpochs, _check_position, batches_in
from ._streams import RngStream

__all__ = ("WeightedRandomSampler",)

_DOUBLE_SCALE = 2.0**-53
_GOLDEN = np.uint64(GOLDEN)
_LN2 = 0.6931471805599453
_SQRT_HALF = 0.7071067811865476
_ATANH_TERMS = tuple(1.0 / (2 * k + 1) for k in range(9))
"""``ln(m) = 2 z (1 + z^2/3 + z^4/5 + ...)``, ``z = (m-1)/(m+1)``; |z| <= 0.172, so nine terms
leave a relative error below 1e-14."""
_CHUNK = 1 << 16


def _exponentials(u: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``-ln(u)`` for ``u`` in ``(0, 1]``, from ``frexp`` and a fixed polynomial (no libm call,
    so the same bits everywhere)."""
    m, e = np.frexp(u)
    small = m < _SQRT_HALF
    m[small] *= 2.0
    e -= small
    z = (m - 1.0) / (m + 1.0)
    z2 = z * z
    series = np.full_like(z, _ATANH_TERMS[-1])
    for term in _ATANH_TERMS[-2::-1]:
        series *= z2
        series += term
    result: npt.NDArray[np.float64] = (-e).astype(np.float64) * _LN2 - 2.0 * z * series
    return result


def _check_weights(weights: Any) -> npt.NDArray[np.float64]:
    if isinstance(weights, (str, bytes)):
        raise TypeError("weights must be a 1-D sequence of numbers but got a string")
    try:
        array = np.asarray(weights)
    except (ValueError, TypeError):
        raise TypeError(
            f"weights must be a 1-D sequence of numbers but got {type(weights).__name__}"
        ) from None
    if array.ndim != 1:
        raise ValueError(f"weights must be one-dimensional but got shape {array.shape}")
    if array.dtype.kind not in "uif":
        raise TypeError(f"weights must hold real numbers but got dtype {array.dtype}")
    if array.size == 0:
        raise ValueError("weights must hold at least one weight but got an empty sequence")
    if array.shape[0] >= INDEX_LIMIT:
        raise ValueError(f"len(weights) must be < 2^63 but got {array.shape[0]}")
    result = np.array(array, dtype=np.float64)
    if not (np.isfinite(result).all() and (result >= 0).all()):
        index = int(np.argmax(~(np.isfinite(result) & (result >= 0))))
        raise ValueError(
            f"weights must be finite and >= 0 but got weights[{index}] = {array[index]!r}"
        )
    if not result.any():
        raise ValueError(f"weights must not all be zero but got {result.shape[0]} zeros")
    result.flags.writeable = False
    return result


class WeightedRandomSampler:
    """Draws ``num_samples`` indices per epoch, item ``i`` in proportion to ``weights[i]``.

    As ``torch.utils.data.WeightedRandomSampler``, cut into batches of ``batch_size``.
    With ``replacement`` (the default), slot ``j`` of step ``s`` of epoch ``e`` is the first
    ``i`` with ``cumsum(weights)[i] > u * total``, ``u`` the ``next_double`` of
    ``SampleRng(derive(seed, e, s, j, 107))``: nothing is planned per epoch. Without it,
    item ``i`` gets the key ``-ln(1 - d_i) / weights[i]``, ``d_i`` the ``i``-th (from 0)
    ``next_double`` of ``SampleRng(derive(seed, e, 0, 0, 107))``, and the epoch is the
    ``num_samples`` items of smallest key in increasing order of (key, index): each index at
    most once, weight-zero items never. An epoch has ``num_samples // batch_size`` steps
    with ``drop_last``, else ``ceil(num_samples / batch_size)``.

    >>> sampler = WeightedRandomSampler([0.0, 1.0, 3.0], 4, 2)
    >>> sorted(set(sampler.indices(0, 0, 0).tolist()) | set(sampler.indices(0, 0, 1).tolist()))
    [1, 2]
    >>> without = WeightedRandomSampler([1, 0, 5, 2], 3, 3, replacement=False)
    >>> sorted(without.indices(7, 0, 0).tolist())
    [0, 2, 3]
    """

    __slots__ = (
        "_batch_size",
        "_cdf",
        "_drop_last",
        "_epochs",
        "_last",
        "_num_samples",
        "_replacement",
        "_steps",
        "_weights",
    )

    def __init__(
        self,
        weights: Any,
        num_samples: int,
        batch_size: int,
        replacement: bool = True,
        drop_last: bool = True,
    ) -> None:
        self._weights = _check_weights(weights)
        self._num_samples = positive_int("num_samples", num_samples, INDEX_LIMIT)
        self._batch_size = batch_size_arg(batch_size)
        self._replacement = flag("replacement", replacement)
        self._drop_last = flag("drop_last", drop_last)
        self._steps = batches_in(self._num_samples, self._batch_size, self._drop_last)
        if self._steps == 0:
            raise ValueError(
                f"num_samples must be >= batch_size with drop_last=True but got "
                f"num_samples={self._num_samples}, batch_size={self._batch_size}"
            )
        positive = int(np.count_nonzero(self._weights))
        self._last = int(self._weights.shape[0] - 1 - np.argmax(self._weights[::-1] > 0))
        self._cdf: npt.NDArray[np.float64] | None = None
        self._epochs: RecentEpochs[IndexArray] | None = None
        if self._replacement:
            with np.errstate(over="ignore"):
                cdf = np.cumsum(self._weights)
            if not math.isfinite(float(cdf[-1])):
                raise ValueError("weights must have a finite sum but their sum overflows to inf")
            cdf.flags.writeable = False
            self._cdf = cdf
        else:
            if self._num_samples > positive:
                raise ValueError(
                    "num_samples must be <= the number of weights > 0 without replacement "
                    f"({positive}) but got {self._num_samples}"
                )
            self._epochs = RecentEpochs(self._plan_epoch)

    @property
    def weights(self) -> npt.NDArray[np.float64]:
        """The weights as a read-only float64 array."""
        return self._weights

    @property
    def num_samples(self) -> int:
        """Indices drawn per epoch."""
        return self._num_samples

    @property
    def batch_size(self) -> int:
        """Indices per full batch."""
        return self._batch_size

    @property
    def replacement(self) -> bool:
        """Whether an index may be drawn more than once per epoch."""
        return self._replacement

    @property
    def drop_last(self) -> bool:
        """Whether the short last batch is dropped."""
        return self._drop_last

    @property
    def steps_per_epoch(self) -> int:
        """Steps (batches) in one epoch, the same in every epoch."""
        return self._steps

    @property
    def batch_sizes(self) -> frozenset[int]:
        """Every batch size ``indices`` returns."""
        rest = self._num_samples - (self._steps - 1) * self._batch_size
        return frozenset({self._batch_size, min(rest, self._batch_size)})

    def _size(self, step: int) -> int:
        return min(self._batch_size, self._num_samples - step * self._batch_size)

    def indices(self, seed: int, epoch: int, step: int) -> IndexArray:
        """Indices of ``(epoch, step)``."""
        seed_value, epoch_value, step_value = _check_position(seed, epoch, step, self._steps)
        size = self._size(step_value)
        if self._epochs is not None:
            start = step_value * self._batch_size
            order = self._epochs.get(seed_value, epoch_value)
            return order[start : start + size].astype(np.int64)
        cdf = cast(npt.NDArray[np.float64], self._cdf)
        states = derive_slots(seed_value, epoch_value, step_value, size, RngStream.WEIGHTED)
        u = (mix_array(states) >> np.uint64(11)).astype(np.float64) * _DOUBLE_SCALE
        picked = np.searchsorted(cdf, u * cdf[-1], side="right")
        return cast(IndexArray, np.minimum(picked, self._last).astype(np.int64))

    def epoch_order(self, seed: int, epoch: int) -> IndexArray:
        """Without replacement: the epoch's ``num_samples`` indices in the order served
        (read-only; int64, or uint32 below 2^32 items)."""
        if self._epochs is None:
            raise ValueError(
                "epoch_order needs replacement=False: with replacement no epoch is planned"
            )
        return self._epochs.get(u64("seed", seed), u64("epoch", epoch))

    def _keys(
        self, seed: int, epoch: int, items: npt.NDArray[np.uint64]
    ) -> npt.NDArray[np.float64]:
        """The exponential keys of ``items`` (``inf`` for a weight of zero)."""
        states = items * _GOLDEN + np.uint64(derive(seed, epoch, 0, 0, RngStream.WEIGHTED))
        u = 1.0 - (mix_array(states) >> np.uint64(11)).astype(np.float64) * _DOUBLE_SCALE
        weights = self._weights[items.astype(np.intp)]
        keys = np.full(items.shape[0], np.inf)
        np.divide(_exponentials(u), weights, out=keys, where=weights > 0)
        keys += 0.0  # -0.0 (u == 1) sorts as +0.0
        return keys

    def _plan_epoch(self, seed: int, epoch: int) -> IndexArray:
        n = int(self._weights.shape[0])
        bits = max(1, (n - 1).bit_length())
        low = np.uint64((1 << bits) - 1)
        high = ~low
        packed = np.empty(n, dtype=np.uint64)  # key bits above, index below
        for start in range(0, n, _CHUNK):
            items = np.arange(start, min(start + _CHUNK, n), dtype=np.uint64)
            chunk = self._keys(seed, epoch, items).view(np.uint64)
            chunk &= high
            chunk |= items
            packed[start : start + items.shape[0]] = chunk
        k = self._num_samples
        if k < n:
            packed.partition(k - 1)
            limit = packed[k - 1] | low  # the k-th key's group, wherever partition put it
            rest = packed[k:]
            packed = np.concatenate([packed[:k], rest[rest <= limit]])
        packed.sort()
        self._order_ties(seed, epoch, packed, bits)
        packed = packed[:k]
        packed &= low
        order = packed.astype(np.uint32 if n <= 1 << 32 else np.int64)
        order.flags.writeable = False
        return cast(IndexArray, order)

    def _order_ties(self, seed: int, epoch: int, packed: npt.NDArray[np.uint64], bits: int) -> None:
        """Within runs of equal truncated keys, order by (full key, index) in place."""
        low = np.uint64((1 << bits) - 1)
        same = np.empty(max(packed.shape[0] - 1, 0), dtype=bool)
        for start in range(0, same.shape[0], _CHUNK):
            stop = min(start + _CHUNK, same.shape[0])
            np.less_equal(
                packed[start + 1 : stop + 1] ^ packed[start:stop], low, out=same[start:stop]
            )
        if not same.any():
            return
        tied = np.zeros(packed.shape[0], dtype=bool)
        tied[1:] |= same
        tied[:-1] |= same
        positions = np.flatnonzero(tied)
        starts = np.ones(positions.shape[0], dtype=bool)  # a position that starts a run
        inner = positions > 0
        starts[inner] = ~same[positions[inner] - 1]
        run = np.cumsum(starts)
        items = packed[positions] & low
        keys = self._keys(seed, epoch, items)
        packed[positions] = packed[positions][np.lexsort((items, keys, run))]

    def fingerprint_fields(self) -> dict[str, Any]:
        """What decides the stream, for the checkpoint's fingerprint (JSON data)."""
        return {
            "n": int(self._weights.shape[0]),
            "weights": values_digest(self._weights.view(np.int64)),
            "num_samples": self._num_samples,
            "batch_size": self._batch_size,
            "replacement": self._replacement,
            "drop_last": self._drop_last,
        }

    def __repr__(self) -> str:
        return (
            f"WeightedRandomSampler(n={self._weights.shape[0]}, num_samples={self._num_samples}, "
            f"batch_size={self._batch_size}, replacement={self._replacement}, "
            f"drop_last={self._drop_last})"
        )

    def __getstate__(self) -> tuple[Any, ...]:
        return (
            self._weights,
            self._num_samples,
            self._batch_size,
            self._replacement,
            self._drop_last,
        )

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.__init__(*state)  # type: ignore[misc]
