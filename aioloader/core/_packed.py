"""Packed batches: ``PackedSampler`` plans rows per step, ``PackCollator`` fills them.

The sampler is a pure function of ``(seed, epoch, step)`` like the other samplers (it uses
the free rng stream 2); its ``layout`` tells the collator where each piece goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any, NamedTuple, cast

import numpy as np
import numpy.typing as npt

from ._check import flag, instance_or_none, lengths_1d, number, positive_int
from ._identity import values_digest
from ._markers import takes_plan
from ._packing import _OVERFLOW, Packing, pack_lengths
from ._permutation import keyed_permutation_array
from ._pool import BatchField, BufferPool, StepBatch, StepState
from ._rng import _derive_unchecked
from ._samplers import IndexArray, RecentEpochs, _check_position, batches_in
from ._sequences import (
    _EMPTY,
    Int64Array,
    _as_arrays,
    byte_layout,
    compiled_for,
    ids_of,
    padding_of,
)
from ._streams import RngStream


class PackedSampler:
    """Batches of ``rows_per_batch`` packed rows; a pure function of ``(seed, epoch, step)``.

    Epoch ``e``: documents in the order ``perm(p, n, derive(seed, e, 0, 0, 2))`` (stream 2)
    are packed by ``pack_lengths`` (so ties in length follow that order), then row ``t`` of
    the packing is served at position ``perm(t, rows, derive(seed, e, 1, 0, 2))``; step ``s``
    takes positions ``s*rows_per_batch ..``. The row count is the same in every epoch.
    ``indices`` lists the document of every piece, row by row; ``layout`` says where each
    goes. The plans of the two most recent epochs are cached.
    """

    __slots__ = (
        "_ctx",
        "_drop_last",
        "_epochs",
        "_lengths",
        "_overflow",
        "_rows",
        "_rows_per_batch",
        "_steps",
    )

    def __init__(
        self,
        lengths: Any,
        context_length: int,
        rows_per_batch: int,
        overflow: str = "split",
        drop_last: bool = False,
    ) -> None:
        self._lengths = lengths_1d("lengths", lengths)
        self._lengths.flags.writeable = False
        if self._lengths.size == 0:
            raise ValueError("lengths must hold at least one document but got none")
        self._ctx = positive_int("context_length", context_length)
        self._rows_per_batch = positive_int("rows_per_batch", rows_per_batch)
        self._overflow = overflow
        self._drop_last = flag("drop_last", drop_last)
        self._rows = pack_lengths(self._lengths, self._ctx, overflow).num_rows
        self._steps = batches_in(self._rows, self._rows_per_batch, self._drop_last)
        self._epochs = RecentEpochs(self._epoch_plan)

    @property
    def steps_per_epoch(self) -> int:
        """``ceil(rows / rows_per_batch)`` (``floor`` with ``drop_last``)."""
        return self._steps

    @property
    def num_rows(self) -> int:
        """Packed rows per epoch."""
        return self._rows

    @property
    def context_length(self) -> int:
        """Tokens per row."""
        return self._ctx

    def indices(self, seed: int, epoch: int, step: int) -> IndexArray:
        """Document of every piece of the batch, row by row."""
        return cast(IndexArray, self.layout(seed, epoch, step).documents.copy())

    def layout(self, seed: int, epoch: int, step: int) -> Packing:
        """The rows of ``(epoch, step)``; ``documents`` holds dataset indices."""
        seed_value, epoch_value, step_value = _check_position(seed, epoch, step, self._steps)
        packing, row_order = self._epochs.get(seed_value, epoch_value)
        chosen = row_order[
            step_value * self._rows_per_batch : (step_value + 1) * self._rows_per_batch
        ]
        ptr = packing.row_ptr
        counts = ptr[chosen + 1] - ptr[chosen]
        pieces = np.concatenate([np.arange(ptr[r], ptr[r + 1]) for r in chosen.tolist()])
        row_ptr = np.zeros(chosen.shape[0] + 1, np.int64)
        np.cumsum(counts, out=row_ptr[1:])
        return Packing(
            self._ctx,
            packing.documents[pieces],
            packing.starts[pieces],
            packing.lengths[pieces],
            packing.offsets[pieces],
            row_ptr,
            packing.dropped,
        )

    def _epoch_plan(self, seed: int, epoch: int) -> tuple[Packing, Int64Array]:
        n = self._lengths.shape[0]
        order_key = _derive_unchecked(seed, epoch, 0, 0, RngStream.PACK)
        keyed = keyed_permutation_array(np.arange(n, dtype=np.uint64), n, order_key)
        order = keyed.astype(np.int64)
        shuffled = pack_lengths(self._lengths[order], self._ctx, self._overflow)
        packing = Packing(
            self._ctx,
            order[shuffled.documents],
            shuffled.starts,
            shuffled.lengths,
            shuffled.offsets,
            shuffled.row_ptr,
            order[shuffled.dropped],
        )
        place_key = _derive_unchecked(seed, epoch, 1, 0, RngStream.PACK)
        position = keyed_permutation_array(
            np.arange(self._rows, dtype=np.uint64), self._rows, place_key
        )
        row_order = np.empty(self._rows, np.int64)
        row_order[position.astype(np.int64)] = np.arange(self._rows)
        return packing, row_order

    def fingerprint_fields(self) -> dict[str, Any]:
        """What decides the stream, for the checkpoint's fingerprint (JSON data)."""
        return {
            "n": int(self._lengths.shape[0]),
            "lengths": values_digest(self._lengths),
            "context_length": self._ctx,
            "rows_per_batch": self._rows_per_batch,
            "overflow": self._overflow,
            "drop_last": self._drop_last,
        }

    def __repr__(self) -> str:
        return (
            f"PackedSampler(n={self._lengths.shape[0]}, context_length={self._ctx}, "
            f"rows_per_batch={self._rows_per_batch}, overflow={self._overflow!r})"
        )


class _PackJob(NamedTuple):
    """One batch to pack: the samples, their layout, and the arrays to fill."""

    arrays: list[npt.NDArray[Any]]
    layout: Packing
    source: Int64Array  # sample slot of every piece
    tokens: npt.NDArray[Any]
    positions: Int64Array
    segments: npt.NDArray[np.int32]


class _PackedState(StepState):
    __slots__ = ("causal_mask", "cu_seqlens", "indices", "position_ids", "segment_ids", "tokens")

    def clear(self) -> None:
        super().clear()
        self.tokens: npt.NDArray[Any] = _EMPTY
        self.position_ids: npt.NDArray[Any] = _EMPTY
        self.segment_ids: npt.NDArray[Any] = _EMPTY
        self.cu_seqlens: npt.NDArray[Any] = _EMPTY
        self.indices: npt.NDArray[Any] = _EMPTY
        self.causal_mask: npt.NDArray[Any] | None = None


class PackedBatch(StepBatch[_PackedState]):
    """Packed rows of one step. Release as ``ImageBatch``."""

    __slots__ = ()

    tokens = BatchField[npt.NDArray[Any]]("[rows, context, ...]: pieces then padding.")
    position_ids = BatchField[Int64Array]("int64 [rows, context]: 0.. in every piece, 0 on pad.")
    segment_ids = BatchField[npt.NDArray[np.int32]](
        "int32 [rows, context]: sample slot, -1 on pad."
    )
    cu_seqlens = BatchField[npt.NDArray[np.int32]](
        "int32: boundaries of the non-empty pieces and padding tails over the flattened rows."
    )
    indices = BatchField[IndexArray]("int64: dataset index of every piece (slot).")
    causal_mask = BatchField["npt.NDArray[np.bool_] | None"]("bool [rows, context, context].")

    DIGEST_FIELDS = (
        "tokens",
        "position_ids",
        "segment_ids",
        "indices",
        "global_step",
    )


@takes_plan
class PackCollator:
    """Packs the sequences of one step into rows of ``context_length``.

    With ``sampler`` (a ``PackedSampler``) the rows are the sampler's (``samples[k]`` is
    piece ``k``); without, the step's samples are packed by ``pack_lengths``.
    """

    __slots__ = ("_causal", "_ctx", "_overflow", "_pool", "_sampler", "_value")

    def __init__(
        self,
        context_length: int,
        *,
        sampler: PackedSampler | None = None,
        overflow: str = "split",
        padding_value: Any = 0,
        causal_mask: bool = False,
        pool: BufferPool | None = None,
    ) -> None:
        self._ctx = positive_int("context_length", context_length)
        sampler = instance_or_none("sampler", sampler, PackedSampler)
        if sampler is not None and sampler.context_length != self._ctx:
            raise ValueError(
                f"context_length must equal sampler.context_length ({sampler.context_length}) "
                f"but got {self._ctx}"
            )
        if not isinstance(overflow, str) or overflow not in _OVERFLOW:
            raise ValueError(f"overflow must be 'split' or 'drop' but got {overflow!r}")
        self._sampler, self._overflow = sampler, overflow
        self._value = number("padding_value", padding_value)
        self._causal = flag("causal_mask", causal_mask)
        checked_pool = instance_or_none("pool", pool, BufferPool)
        self._pool = checked_pool if checked_pool is not None else BufferPool()

    def __call__(self, samples: Sequence[Any], plan: Any) -> PackedBatch:
        """Pack the samples of ``plan``."""
        arrays = _as_arrays("samples", samples)
        if self._sampler is not None:
            layout = self._sampler.layout(plan.seed, plan.epoch, plan.step)
            if not np.array_equal(layout.documents, plan.indices):
                raise ValueError(
                    "plan.indices must be the sampler's pieces for this step but differ"
                )
            source = np.arange(layout.documents.shape[0])
        else:
            layout = pack_lengths([a.shape[0] for a in arrays], self._ctx, self._overflow)
            source = layout.documents
        if len(arrays) != plan.indices.shape[0]:
            raise ValueError(
                f"samples must hold {plan.indices.shape[0]} sequences but got {len(arrays)}"
            )
        rows, ctx, pool = layout.num_rows, self._ctx, self._pool
        tokens = pool.acquire((rows, ctx, *arrays[0].shape[1:]), arrays[0].dtype)
        positions = pool.acquire((rows, ctx), np.int64)
        segments = pool.acquire((rows, ctx), np.int32)
        buffers = [tokens, positions, segments]
        try:
            kernels = compiled_for(arrays)
            job = _PackJob(arrays, layout, source, tokens, positions, segments)
            if kernels is None or not self._fill_compiled(kernels, job):
                self._fill_reference(job)
            mask = None
            if self._causal:
                mask = pool.acquire((rows, ctx, ctx), np.bool_)
                buffers.append(mask)
                if kernels is not None:
                    kernels.causal_mask(segments, mask)
                else:
                    np.equal(segments[:, :, None], segments[:, None, :], out=mask)
                    mask &= segments[:, :, None] >= 0
                    mask &= np.tri(ctx, dtype=np.bool_)
        except BaseException:
            for buffer in buffers:
                pool.release(buffer)
            raise
        starts = layout.row_of_piece() * ctx + layout.offsets
        edges = np.concatenate((starts, starts + layout.lengths, np.arange(rows + 1) * ctx))
        state = pool.reuse(_PackedState) or _PackedState()
        state.pool, state.buffers = pool, tuple(buffers)
        state.tokens, state.position_ids, state.segment_ids = tokens, positions, segments
        state.cu_seqlens = np.unique(edges).astype(np.int32)
        state.indices, state.causal_mask = plan.indices, mask
        state.stamp(plan)
        return PackedBatch(state)

    def _fill_compiled(self, kernels: ModuleType, job: _PackJob) -> bool:
        """Tokens, positions and segments in one GIL-free call; False if it declines."""
        arrays, layout, source, tokens, positions, segments = job
        rows, pattern = byte_layout(tokens, self._value)
        pieces = [
            np.ascontiguousarray(a, dtype=np.int64)
            for a in (layout.row_ptr, source, layout.starts, layout.lengths, layout.offsets)
        ]
        status = kernels.pack_into(
            ids_of(arrays),
            kernels.HEADER,
            tokens.dtype.itemsize,
            *pieces,
            pieces[1],
            rows,
            pattern,
            positions,
            segments,
        )
        return bool(status < 0)

    def _fill_reference(self, job: _PackJob) -> None:
        """The numpy reference of ``_fill_compiled``."""
        arrays, layout, source, tokens, positions, segments = job
        tokens[...] = padding_of(tokens.dtype, self._value)
        row_of = layout.row_of_piece().tolist()
        for r, k, s, n, o in zip(
            row_of,
            *(a.tolist() for a in (source, layout.starts, layout.lengths, layout.offsets)),
            strict=True,
        ):
            tokens[r, o : o + n] = arrays[k][s : s + n]
        flat, piece, within = layout.position_index()
        positions.fill(0)
        positions.reshape(-1)[flat] = within
        segments.fill(-1)
        segments.reshape(-1)[flat] = source[piece]


__all__ = ("PackCollator", "PackedBatch", "PackedSampler")
