"""Keyed Feistel permutation of ``[0, n)`` with cycle walking (docs/samplers.md).

No table is built: ``perm(p)`` costs a few ``mix`` calls, for any ``n < 2^64``.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from ._check import U64_LIMIT, as_int, u64
from ._compiled import compiled
from ._rng import MASK64, U64Array, _mix_in_place, _mix_unchecked

ROUND_GAMMA = 0x632BE59BD9B4E019
_CHUNK = 1 << 15  # lanes per block: keeps the temporaries of a pass in cache
_SCALAR_TAIL = 16  # lanes still walking: fewer than this finish in Python ints (cheaper)
_ROUND_KEYS = tuple((r * ROUND_GAMMA) & MASK64 for r in range(4))


def _geometry(n: int) -> tuple[int, int]:
    bits = (n - 1).bit_length()
    half = (bits + 1) // 2
    return half, (1 << half) - 1


def _check_n(n: Any) -> int:
    return u64("n", n)


def keyed_permutation(p: int, n: int, key: int) -> int:
    """Position ``p`` of the permutation of ``[0, n)`` selected by ``key``.

    >>> sorted(keyed_permutation(p, 10, 7) for p in range(10)) == list(range(10))
    True
    """
    size = _check_n(n)
    position = as_int("p", p)
    if not 0 <= position < size:
        raise ValueError(f"p must be an integer in [0, n) = [0, {size}) but got {position}")
    secret = u64("key", key)
    if size <= 1:
        return 0
    half, mask = _geometry(size)
    round_keys = tuple(secret ^ rk for rk in _ROUND_KEYS)
    x = position
    while True:
        left, right = x >> half, x & mask
        for round_key in round_keys:
            left, right = right, left ^ (_mix_unchecked(right ^ round_key) & mask)
        x = (left << half) | right
        if x < size:
            return x


def _walk(x: int, size: int, half: int, mask: int, round_keys: list[int]) -> int:
    """Continue the cycle walk of one value ``x >= size`` (one Feistel pass at a time)."""
    while x >= size:
        left, right = x >> half, x & mask
        for round_key in round_keys:
            left, right = right, left ^ (_mix_unchecked(right ^ round_key) & mask)
        x = (left << half) | right
    return x


def keyed_permutation_array(positions: Any, n: int, key: int) -> U64Array:
    """``keyed_permutation`` of every position in an array, as uint64.

    The cycle walk repeats only for the lanes still outside ``[0, n)``.
    """
    size = _check_n(n)
    secret = u64("key", key)
    lanes = np.asarray(positions)
    if lanes.dtype.kind not in "ui":
        raise TypeError(f"positions must hold integers but got dtype {lanes.dtype}")
    if lanes.size:
        low, high = int(lanes.min()), int(lanes.max())
        if low < 0 or high >= size:
            bad = low if low < 0 else high
            raise ValueError(f"positions must be in [0, n) = [0, {size}) but got {bad}")
    if size <= 1:
        return np.zeros(lanes.shape, dtype=np.uint64)
    half, mask = _geometry(size)
    kernels = compiled()
    if kernels is not None:
        flat = np.ascontiguousarray(lanes.ravel(), dtype=np.uint64)
        out = np.empty_like(flat)
        keys = np.array([secret ^ rk for rk in _ROUND_KEYS], np.uint64)
        kernels.permute(flat, out, np.uint64(size), np.uint64(half), np.uint64(mask), keys)
        return out.reshape(lanes.shape)
    shift, lane_mask = np.uint64(half), np.uint64(mask)
    round_keys = [np.uint64(secret ^ rk) for rk in _ROUND_KEYS]
    limit = np.uint64(size) if size < U64_LIMIT else None

    def one_pass(x: U64Array) -> U64Array:
        left, right = x >> shift, x & lane_mask
        mixed = np.empty_like(right)
        for round_key in round_keys:
            np.bitwise_xor(right, round_key, out=mixed)
            _mix_in_place(mixed)
            mixed &= lane_mask
            mixed ^= left
            left, right, mixed = right, mixed, left
        left <<= shift
        left |= right
        return cast(U64Array, left)

    flat = lanes.astype(np.uint64).ravel()
    out = np.empty_like(flat)
    for begin in range(0, flat.shape[0], _CHUNK):
        block = one_pass(flat[begin : begin + _CHUNK])
        if limit is not None:
            pending = np.flatnonzero(block >= limit)
            while pending.size > _SCALAR_TAIL:
                walked = one_pass(block[pending])
                block[pending] = walked
                pending = pending[walked >= limit]
            if pending.size:
                # A few lanes walk on for several passes; each numpy pass costs the same
                # for 1 lane as for 16, so the stragglers continue one by one.
                rounds = [secret ^ rk for rk in _ROUND_KEYS]
                for lane in pending.tolist():
                    block[lane] = _walk(int(block[lane]), size, half, mask, rounds)
        out[begin : begin + _CHUNK] = block
    return out.reshape(lanes.shape)
