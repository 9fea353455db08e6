"""Padding variable-length sequences: ``pad_sequences`` and ``PadCollator``.

``pad_sequences`` matches ``torch.nn.utils.rnn.pad_sequence(..., batch_first=True)``;
``PadCollator`` builds a ``PaddedBatch`` (tokens, lengths, attention mask) from a pool.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from ._check import instance_or_none, number, seen
from ._compiled import compiled
from ._markers import takes_plan
from ._pool import BatchField, BufferPool, StepBatch, StepState
from ._samplers import IndexArray

Int64Array = npt.NDArray[np.int64]
_SIDES = ("left", "right")
_EMPTY: npt.NDArray[Any] = np.empty(0, np.int64)
_EMPTY.flags.writeable = False


def _as_arrays(name: str, seqs: Any) -> list[npt.NDArray[Any]]:
    if (
        isinstance(seqs, (str, bytes))
        or not isinstance(seqs, (Sequence, np.ndarray))
        or (isinstance(seqs, np.ndarray) and seqs.ndim == 0)
    ):
        raise TypeError(f"{name} must be a sequence of arrays but got {seen(seqs)}")
    arrays = [np.asarray(s) for s in seqs]
    if not arrays:
        raise ValueError(f"{name} must hold at least one sequence but got none")
    for k, a in enumerate(arrays):
        if a.dtype.kind not in "biufc":
            raise TypeError(f"{name}[{k}] must hold numbers but got dtype {a.dtype}")
    trailing = arrays[0].shape[1:]
    for k, a in enumerate(arrays):
        if a.ndim == 0 or a.shape[1:] != trailing:
            raise ValueError(
                f"{name}[{k}] must have shape [L, *{list(trailing)}] like {name}[0] "
                f"but got {list(a.shape)}"
            )
    return arrays


def _check_side(padding_side: Any) -> str:
    if not isinstance(padding_side, str) or padding_side not in _SIDES:
        raise ValueError(f"padding_side must be 'left' or 'right' but got {padding_side!r}")
    return padding_side


def padding_of(dtype: np.dtype[Any], value: Any) -> npt.NDArray[Any]:
    """``value`` cast to ``dtype`` as one assignment casts it, or an error naming it.

    >>> padding_of(np.dtype(np.uint8), 7.9)
    array(7, dtype=uint8)
    """
    pattern = np.empty((), dtype)
    try:
        pattern[...] = value
    except (OverflowError, ValueError, TypeError) as error:
        kind = TypeError if isinstance(error, TypeError) else ValueError
        raise kind(
            f"padding_value must fit the samples' dtype {dtype} but got {value!r} ({error})"
        ) from None
    return pattern


def _fill_padded(
    out: npt.NDArray[Any], arrays: list[npt.NDArray[Any]], value: Any, side: str
) -> None:
    width = out.shape[1]
    out[...] = padding_of(out.dtype, value)
    for i, a in enumerate(arrays):
        n = a.shape[0]
        where = slice(0, n) if side == "right" else slice(width - n, width)
        try:
            with np.errstate(invalid="raise", over="raise"):
                out[i, where] = a
        except FloatingPointError as error:
            raise ValueError(
                f"seqs[{i}] must fit the dtype {out.dtype} of the first sequence but holds "
                f"{a.dtype} values that do not ({error})"
            ) from None


_DTYPE = operator.attrgetter("dtype")


def compiled_for(arrays: list[npt.NDArray[Any]]) -> ModuleType | None:
    """The compiled kernels when they apply to ``arrays`` (all of one dtype), else ``None``."""
    kernels = compiled()
    if kernels is None or set(map(_DTYPE, arrays)) != {arrays[0].dtype}:
        return None
    return kernels


def byte_layout(
    out: npt.NDArray[Any], value: Any
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8]]:
    """``out`` as bytes ``[rows, -1]``, and one padded position (``out[i, t]``) as bytes.

    The pattern is written by the same assignment the reference uses (``x[...] = value``),
    so casting, rounding and errors are the same.
    """
    pattern = np.empty((1, *out.shape[2:]), out.dtype)
    pattern[...] = padding_of(out.dtype, value)
    rows = out.reshape(out.shape[0], math.prod(out.shape[1:])).view(np.uint8)
    return rows, pattern.reshape(-1).view(np.uint8)


def ids_of(arrays: list[npt.NDArray[Any]]) -> npt.NDArray[np.int64]:
    """The ``id`` of every array, for the kernels (the caller keeps the arrays alive)."""
    return np.fromiter(map(id, arrays), np.int64, len(arrays))


def pad_sequences(
    seqs: Sequence[Any], padding_value: Any = 0, padding_side: str = "right"
) -> npt.NDArray[Any]:
    """Stack ``[L_i, ...]`` sequences into ``[B, max L_i, ...]`` with ``padding_value``.

    Same values and dtype (that of ``seqs[0]``) as ``pad_sequence(batch_first=True)``.

    >>> pad_sequences([[1, 2, 3], [4]], padding_side="left").tolist()
    [[1, 2, 3], [0, 0, 4]]
    """
    side = _check_side(padding_side)
    number("padding_value", padding_value)
    arrays = _as_arrays("seqs", seqs)
    width = max(a.shape[0] for a in arrays)
    out = np.empty((len(arrays), width, *arrays[0].shape[1:]), arrays[0].dtype)
    _fill_padded(out, arrays, padding_value, side)
    return out


class _PaddedState(StepState):
    __slots__ = ("attention_mask", "indices", "lengths", "tokens")

    def clear(self) -> None:
        super().clear()
        self.tokens: npt.NDArray[Any] = _EMPTY
        self.lengths: npt.NDArray[Any] = _EMPTY
        self.attention_mask: npt.NDArray[Any] = _EMPTY
        self.indices: npt.NDArray[Any] = _EMPTY


class PaddedBatch(StepBatch[_PaddedState]):
    """Padded sequences: ``tokens [B, L, ...]``, ``lengths`` int64, ``attention_mask`` bool.

    ``attention_mask[i, t]`` is True on real tokens. Release as ``ImageBatch``.
    """

    __slots__ = ()

    tokens = BatchField[npt.NDArray[Any]]("[B, L, ...] equal to pad_sequence(batch_first=True).")
    lengths = BatchField[Int64Array]("int64 [B]: real lengths.")
    attention_mask = BatchField[npt.NDArray[np.bool_]]("bool [B, L]: True on real tokens.")
    indices = BatchField[IndexArray]("int64 [B]: dataset indices.")

    DIGEST_FIELDS = (
        "tokens",
        "lengths",
        "attention_mask",
        "indices",
        "global_step",
    )


@takes_plan
class PadCollator:
    """Collates ``[L_i, ...]`` sequences into a ``PaddedBatch`` (arrays from a pool).

    >>> from aioloader.core import BatchPlan
    >>> plan = BatchPlan(0, 0, 0, 0, np.array([4, 9]))
    >>> with PadCollator(padding_value=-1)([[1, 2], [3]], plan) as batch:
    ...     batch.tokens.tolist(), batch.attention_mask.tolist()
    ([[1, 2], [3, -1]], [[True, True], [True, False]])
    """

    __slots__ = ("_pool", "_side", "_value")

    def __init__(
        self, padding_value: Any = 0, padding_side: str = "right", pool: BufferPool | None = None
    ) -> None:
        self._value = number("padding_value", padding_value)
        self._side = _check_side(padding_side)
        checked_pool = instance_or_none("pool", pool, BufferPool)
        self._pool = checked_pool if checked_pool is not None else BufferPool()

    def __call__(self, samples: Sequence[Any], plan: Any) -> PaddedBatch:
        """Pad the samples of ``plan`` (one per slot)."""
        arrays = _as_arrays("samples", samples)
        n = len(arrays)
        if plan.indices.shape != (n,):
            raise ValueError(
                f"plan.indices must hold one index per sample ({n}) but got shape "
                f"{plan.indices.shape}"
            )
        pool = self._pool
        lengths = pool.acquire((n,), np.int64)
        lengths[:] = [a.shape[0] for a in arrays]
        width = int(lengths.max())
        tokens = pool.acquire((n, width, *arrays[0].shape[1:]), arrays[0].dtype)
        mask = pool.acquire((n, width), np.bool_)
        try:
            kernels = compiled_for(arrays)
            if kernels is None or not self._fill_compiled(kernels, arrays, lengths, tokens, mask):
                self._fill_reference(arrays, lengths, tokens, mask)
        except BaseException:
            for buffer in (lengths, tokens, mask):
                pool.release(buffer)
            raise
        state = pool.reuse(_PaddedState) or _PaddedState()
        state.pool, state.buffers = pool, (lengths, tokens, mask)
        state.tokens, state.lengths, state.attention_mask = tokens, lengths, mask
        state.indices = plan.indices
        state.stamp(plan)
        return PaddedBatch(state)

    def _fill_compiled(
        self,
        kernels: ModuleType,
        arrays: list[npt.NDArray[Any]],
        lengths: Int64Array,
        tokens: npt.NDArray[Any],
        mask: npt.NDArray[np.bool_],
    ) -> bool:
        """Tokens and mask in one GIL-free call; False (nothing written) if it declines."""
        rows, pattern = byte_layout(tokens, self._value)
        status = kernels.pad_into(
            ids_of(arrays),
            kernels.HEADER,
            tokens.dtype.itemsize,
            lengths,
            rows,
            pattern,
            self._side == "left",
            mask,
        )
        return bool(status < 0)

    def _fill_reference(
        self,
        arrays: list[npt.NDArray[Any]],
        lengths: Int64Array,
        tokens: npt.NDArray[Any],
        mask: npt.NDArray[np.bool_],
    ) -> None:
        """The numpy reference of ``_fill_compiled``."""
        width = tokens.shape[1]
        _fill_padded(tokens, arrays, self._value, self._side)
        columns = np.arange(width)
        if self._side == "right":
            np.less(columns[None, :], lengths[:, None], out=mask)
        else:
            np.greater_equal(columns[None, :], (width - lengths)[:, None], out=mask)


__all__ = ("PadCollator", "PaddedBatch", "pad_sequences")
