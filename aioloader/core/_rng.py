"""SplitMix64 random numbers and key derivation (docs/contract.md, "Random numbers").

Scalar forms work on Python ints; array forms work on ``numpy.uint64`` arrays, whose
arithmetic wraps modulo 2^64 exactly as the contract requires. Both agree bit for bit.
The stream ids (the last argument of ``derive``) are registered in ``RngStream``.
"""

from __future__ import annotations

from collections import deque
from itertools import repeat
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ._check import int_in_range, u64

GOLDEN = 0x9E3779B97F4A7C15
MIX_C1 = 0xBF58476D1CE4E5B9
MIX_C2 = 0x94D049BB133111EB
DERIVE_SALT = 0xD1B54A32D192ED03
MASK64 = (1 << 64) - 1

U64Array = npt.NDArray[np.uint64]

_SINGLE_SCALE = np.float32(2.0**-24)
_DOUBLE_SCALE = 2.0**-53


def _mix_unchecked(x: int) -> int:
    z = (x + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * MIX_C1) & MASK64
    z = ((z ^ (z >> 27)) * MIX_C2) & MASK64
    return z ^ (z >> 31)


def mix(x: int) -> int:
    """SplitMix64 output for a generator whose state is ``x`` before the step.

    >>> hex(mix(0))
    '0xe220a8397b1dcdaf'
    """
    return _mix_unchecked(u64("x", x))


_U_GOLDEN = np.uint64(GOLDEN)
_U_C1 = np.uint64(MIX_C1)
_U_C2 = np.uint64(MIX_C2)
_U_30, _U_27, _U_31 = np.uint64(30), np.uint64(27), np.uint64(31)


def mix_array(x: U64Array) -> U64Array:
    """``mix`` applied to every element of a uint64 array (returns a new array)."""
    z = np.asarray(x, dtype=np.uint64) + _U_GOLDEN
    z ^= z >> _U_30
    z *= _U_C1
    z ^= z >> _U_27
    z *= _U_C2
    z ^= z >> _U_31
    return cast(U64Array, z)


def _mix_in_place(z: U64Array) -> None:
    """``mix`` of every element of a uint64 array, overwriting it (no temporaries kept)."""
    z += _U_GOLDEN
    z ^= z >> _U_30
    z *= _U_C1
    z ^= z >> _U_27
    z *= _U_C2
    z ^= z >> _U_31


def _derive_unchecked(seed: int, epoch: int, step: int, slot: int, stream: int) -> int:
    h = _mix_unchecked(seed ^ DERIVE_SALT)
    for value in (epoch, step, slot, stream):
        h = _mix_unchecked((h + value) & MASK64)
    return h


def derive(seed: int, epoch: int, step: int, slot: int, stream: int) -> int:
    """Key for one (seed, epoch, step, slot, stream); every argument is in ``[0, 2^64)``."""
    return _derive_unchecked(
        u64("seed", seed),
        u64("epoch", epoch),
        u64("step", step),
        u64("slot", slot),
        u64("stream", stream),
    )


def slot_prefix(seed: int, epoch: int, step: int) -> int:
    """The part of ``derive`` that ``(seed, epoch, step)`` fix for every slot of a step.

    ``derive(seed, epoch, step, slot, stream) == mix((mix((prefix + slot) % 2**64) + stream)
    % 2**64)``, which is how ``derive_slots`` (and the compiled collator) use it.

    >>> prefix = slot_prefix(1, 2, 3)
    >>> derive(1, 2, 3, 4, 5) == mix((mix((prefix + 4) & MASK64) + 5) & MASK64)
    True
    """
    h = _mix_unchecked(u64("seed", seed) ^ DERIVE_SALT)
    h = _mix_unchecked((h + u64("epoch", epoch)) & MASK64)
    return _mix_unchecked((h + u64("step", step)) & MASK64)


def derive_slots(seed: int, epoch: int, step: int, slots: Any, stream: int) -> U64Array:
    """``derive(seed, epoch, step, slot, stream)`` for every slot of an array, in one call.

    ``slots`` may be an int (meaning ``range(slots)``) or an array of slot numbers.
    """
    if isinstance(slots, (int, np.integer)) and not isinstance(slots, bool):
        lanes = np.arange(u64("slots", slots), dtype=np.uint64)
    else:
        lanes = np.asarray(slots)
        if lanes.dtype.kind not in "ui":
            raise TypeError(f"slots must hold integers but got dtype {lanes.dtype}")
        if lanes.size and (lanes.min() < 0):
            raise ValueError(f"slots must be in [0, 2^64) but got {int(lanes.min())}")
        lanes = lanes.astype(np.uint64)
    h = slot_prefix(seed, epoch, step)
    keys = mix_array(lanes + np.uint64(h))
    keys += np.uint64(u64("stream", stream))
    return mix_array(keys)


def _mul_u64(a: int, b: int) -> tuple[int, int]:
    product = a * b
    return product >> 64, product & MASK64


class SampleRng:
    """A SplitMix64 generator: ``next_u64`` returns ``mix(state)``, then adds the golden gamma.

    Not thread-safe; every sample gets its own, built from ``derive``.

    >>> hex(SampleRng(0).next_u64())
    '0xe220a8397b1dcdaf'
    """

    __slots__ = ("state",)

    def __init__(self, state: int) -> None:
        self.state = u64("state", state)

    def __repr__(self) -> str:
        return f"SampleRng(state={self.state:#x})"

    def next_u64(self) -> int:
        """Next 64-bit output."""
        state = self.state
        self.state = (state + GOLDEN) & MASK64
        return _mix_unchecked(state)

    def next_single(self) -> np.float32:
        """Uniform float32 in ``[0, 1)``: ``(u >> 40) * 2^-24``, exact."""
        return cast(np.float32, np.float32(self.next_u64() >> 40) * _SINGLE_SCALE)

    def next_double(self) -> float:
        """Uniform float64 in ``[0, 1)``: ``(u >> 11) * 2^-53``, exact."""
        return (self.next_u64() >> 11) * _DOUBLE_SCALE

    def next_int(self, n: int) -> int:
        """Unbiased integer in ``[0, n)`` by multiply-shift with rejection, ``1 <= n < 2^64``."""
        bound = _int_bound(n)
        high, low = _mul_u64(self.next_u64(), bound)
        if low < bound:
            threshold = ((1 << 64) - bound) % bound
            while low < threshold:
                high, low = _mul_u64(self.next_u64(), bound)
        return high

    def next_normal(self) -> np.float32:
        """Approximately standard normal float32: twelve singles summed in float32, minus 6."""
        acc = np.float32(0.0)
        for _ in range(12):
            acc = np.float32(acc + self.next_single())
        return cast(np.float32, np.float32(acc - np.float32(6.0)))


_NEW_RNG = SampleRng.__new__
_SET_STATE = vars(SampleRng)["state"].__set__  # the slot's descriptor


def sample_rngs(keys: list[int]) -> list[SampleRng]:
    """``[SampleRng(key) for key in keys]`` for keys known to be in ``[0, 2^64)``.

    For ``derive_slots(...).tolist()``: made without a Python-level call per generator
    (C-level ``map`` over ``__new__`` and the ``state`` slot), several times faster.

    >>> [rng.state for rng in sample_rngs([0, 2**64 - 1])] == [0, 2**64 - 1]
    True
    """
    rngs = list(map(_NEW_RNG, repeat(SampleRng, len(keys))))
    deque(map(_SET_STATE, rngs, keys), 0)
    return rngs


def _int_bound(n: Any) -> int:
    return int_in_range("n", n, 1, 1 << 64)


class BatchRng:
    """Many ``SampleRng`` lanes advanced together; lane ``i`` matches ``SampleRng(states[i])``.

    Used by vectorised augmentations: one array call draws for every slot of a batch.
    """

    __slots__ = ("states",)

    def __init__(self, states: U64Array) -> None:
        self.states = np.array(states, dtype=np.uint64, copy=True)

    def __len__(self) -> int:
        return int(self.states.shape[0])

    def next_u64(self) -> U64Array:
        """Next output of every lane."""
        out = mix_array(self.states)
        self.states += np.uint64(GOLDEN)
        return out

    def next_single(self) -> npt.NDArray[np.float32]:
        """Next ``next_single`` of every lane."""
        out = (self.next_u64() >> np.uint64(40)).astype(np.float32) * _SINGLE_SCALE
        return cast(npt.NDArray[np.float32], out)

    def next_double(self) -> npt.NDArray[np.float64]:
        """Next ``next_double`` of every lane."""
        out = (self.next_u64() >> np.uint64(11)).astype(np.float64) * _DOUBLE_SCALE
        return cast(npt.NDArray[np.float64], out)

    def next_normal(self) -> npt.NDArray[np.float32]:
        """Next ``next_normal`` of every lane (float32 accumulation, as the scalar form).

        The twelve outputs of every lane come from one ``mix`` over a ``[12, lanes]`` array;
        the float32 sum then runs strictly left to right, one add per draw.
        """
        steps = _TWELVE_STEPS[:, None] + self.states[None, :]
        _mix_in_place(steps)
        singles = (steps >> np.uint64(40)).astype(np.float32)
        singles *= _SINGLE_SCALE
        acc = singles[0].copy()
        for k in range(1, 12):
            acc += singles[k]
        self.states += _TWELVE_GOLDEN
        acc -= np.float32(6.0)
        return cast(npt.NDArray[np.float32], acc)


_TWELVE_STEPS = np.arange(12, dtype=np.uint64) * np.uint64(GOLDEN)
_TWELVE_GOLDEN = np.uint64((12 * GOLDEN) & MASK64)
