"""``ImageSample``, ``ImageBatch``, ``ImageBatchCollator`` (docs/contract.md, "Image batches").

``ImageBatchCollator`` pads planar float32 images ``[C, H, W_i]`` to one ``[B, C, H, Wp]``
batch drawn from a ``BufferPool``. An augmentation edits each sample in a contiguous scratch
copy with ``SampleRng(derive(seed, e, s, slot, 1))``; one that also offers ``augment_batch``
(such as ``GainOffset``) is applied to the whole batch at once, with the same bits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ._check import positive_int, real
from ._compiled import compiled
from ._image_checks import (
    _EMPTY,
    F32,
    I32,
    INT32_LIMIT,
    F32Array,
    I32Array,
    _check_indices,
    _Checked,
    _gather,
    _gather_checked,
    _gather_fast,
    _Gathered,
)
from ._image_ops import BatchAugmentation as BatchAugmentation
from ._image_ops import GainOffset as GainOffset
from ._image_ops import gray8_to_planar as gray8_to_planar
from ._image_ops import rgb8_to_planar as rgb8_to_planar
from ._markers import takes_plan
from ._plan import BatchPlan
from ._pool import BatchField, BufferPool, StepBatch, StepState
from ._rng import BatchRng, SampleRng, slot_prefix
from ._streams import RngStream

_NO_KEYS = np.empty(0, np.uint64)
_F0 = np.float32(0.0)
_U0 = np.uint64(0)
_AUGMENT = np.uint64(RngStream.AUGMENT)


@dataclass(frozen=True, slots=True)
class ImageSample:
    """One planar image with its CTC target and class label.

    Attributes:
        image: float32 ``[C, H, W]`` with ``W >= 1``.
        target: A sequence of int32 values (concatenated across the batch).
        label: An int32 label.
    """

    image: F32Array
    target: Sequence[int] | npt.NDArray[np.integer[Any]] = ()
    label: int = 0


class _ImageState(StepState):
    __slots__ = ("images", "indices", "labels", "target_lengths", "targets", "widths")

    def clear(self) -> None:
        super().clear()
        self.images: npt.NDArray[Any] = _EMPTY
        self.widths: npt.NDArray[Any] = _EMPTY
        self.targets: npt.NDArray[Any] = _EMPTY
        self.target_lengths: npt.NDArray[Any] = _EMPTY
        self.labels: npt.NDArray[Any] = _EMPTY
        self.indices: npt.NDArray[Any] = _EMPTY


class ImageBatch(StepBatch[_ImageState]):
    """A collated image batch; ``release()`` or ``with batch:`` returns its buffers.

    Fields: ``images`` float32 ``[B, C, H, Wp]``; ``widths``, ``targets`` (concatenated),
    ``target_lengths``, ``labels``, ``indices``: int32; ``global_step``, ``epoch``, ``step``.
    Reading any field after release raises ``BufferReleasedError``.
    """

    __slots__ = ()

    def __init__(
        self,
        images: F32Array,
        widths: I32Array,
        targets: I32Array,
        target_lengths: I32Array,
        labels: I32Array,
        indices: I32Array,
        *,
        global_step: int = 0,
        epoch: int = 0,
        step: int = 0,
    ) -> None:
        state = _ImageState()
        state.images, state.widths, state.targets = images, widths, targets
        state.target_lengths, state.labels, state.indices = target_lengths, labels, indices
        state.global_step, state.epoch, state.step = global_step, epoch, step
        super().__init__(state)

    images = BatchField[F32Array]("float32 [B, C, H, Wp]; image i is padded after widths[i].")
    widths = BatchField[I32Array]("int32 [B]: real widths.")
    targets = BatchField[I32Array]("int32 [sum(target_lengths)]: targets in slot order.")
    target_lengths = BatchField[I32Array]("int32 [B]: length of each sample's target.")
    labels = BatchField[I32Array]("int32 [B]: labels.")
    indices = BatchField[I32Array]("int32 [B]: dataset indices.")

    def __len__(self) -> int:
        return int(self.live_state().images.shape[0])

    DIGEST_FIELDS = (
        "images",
        "widths",
        "targets",
        "target_lengths",
        "labels",
        "indices",
        "global_step",
        "epoch",
        "step",
    )

    def __repr__(self) -> str:
        state = self._state
        if state is None:
            return "ImageBatch(<released>)"
        return f"ImageBatch(images={state.images.shape}, global_step={state.global_step})"


Augmentation = Callable[[F32Array, SampleRng], None]
"""Edits a contiguous float32 ``[C, H, W_i]`` scratch in place; may offer ``augment_batch``."""


@takes_plan
class ImageBatchCollator:
    """Collates ``ImageSample`` objects into an ``ImageBatch`` (docs/contract.md, "Image batches").

    Args:
        width_multiple: ``Wp`` is the largest width rounded up to a multiple of this.
        pad_value: Written in columns ``W_i..Wp-1`` of every image.
        augment: ``augment(scratch, rng)`` editing a contiguous float32 ``[C, H, W_i]`` copy
            in place; if it has ``augment_batch`` the batch form is used (same result).
        pool: Where the batch arrays come from; a private pool when ``None``.

    Safe to call from several threads at once.
    """

    __slots__ = ("_augment", "_pad", "_pool", "_width_multiple")

    def __init__(
        self,
        width_multiple: int = 1,
        pad_value: float = 0.0,
        augment: Augmentation | None = None,
        pool: BufferPool | None = None,
    ) -> None:
        self._width_multiple = positive_int("width_multiple", width_multiple, INT32_LIMIT)
        with np.errstate(over="ignore"):
            self._pad = np.float32(real("pad_value", pad_value))
        if not np.isfinite(self._pad):
            raise ValueError(f"pad_value must be finite in float32 but got {pad_value!r}")
        if augment is not None and not callable(augment):
            raise TypeError(f"augment must be callable or None but got {type(augment).__name__}")
        self._augment = augment
        if pool is not None and not isinstance(pool, BufferPool):
            raise TypeError(f"pool must be a BufferPool or None but got {type(pool).__name__}")
        self._pool = pool if pool is not None else BufferPool()

    @property
    def pool(self) -> BufferPool:
        """The pool the batch arrays come from."""
        return self._pool

    def __call__(self, samples: Sequence[ImageSample], plan: BatchPlan) -> ImageBatch:
        """Collate the samples of ``plan`` (one per slot, in slot order)."""
        n = len(samples)
        if n == 0:
            raise ValueError("samples must hold at least one sample but got 0")
        indices = plan.indices
        if indices.shape != (n,):
            raise ValueError(
                f"plan.indices must hold one index per sample ({n}) but got shape {indices.shape}"
            )
        kernels = compiled()
        augment = self._augment
        if kernels is not None and (augment is None or type(augment) is GainOffset):
            checked = _gather_checked(samples, indices, kernels)
            if checked is not None:
                return self._collate_checked(kernels, *checked, plan)
        _check_indices(indices)
        if kernels is not None:
            gathered = _gather_fast(samples, kernels)
            if gathered is not None:
                return self._collate_compiled(kernels, gathered, plan)
        images, widths, labels, targets = _gather(samples, indices)

        def fill(out: F32Array, out_widths: I32Array) -> None:
            self._fill(out, images, widths, out_widths, plan)

        return self._collate_into(images[0].shape, max(widths), widths, labels, targets, plan, fill)

    def _collate_checked(
        self, kernels: ModuleType, checked: _Checked, widest: int, total: int, plan: BatchPlan
    ) -> ImageBatch:
        """The common case in one GIL-free call: int fields, targets, keys, pixels and pad."""
        images = checked.images
        n = len(images)
        c, h = images[0].shape[0], images[0].shape[1]
        multiple = self._width_multiple
        wp = -(-widest // multiple) * multiple
        pool = self._pool
        out = pool.acquire((n, c, h, wp), F32)
        ints = pool.acquire((4 * n + total,), I32)
        augment = self._augment
        keys, prefix, stream = _NO_KEYS, _U0, _U0
        mode, gain, offset = kernels.COPY_AND_PAD, _F0, _F0
        if augment is not None:
            mode = kernels.GAIN_OFFSET_AND_PAD
            gain_offset = cast(GainOffset, augment)
            gain, offset = np.float32(gain_offset.gain_std), np.float32(gain_offset.offset_std)
            if plan.slots is None:  # lanes 0..n-1: the kernel derives the keys
                prefix = np.uint64(slot_prefix(plan.seed, plan.epoch, plan.step))
                stream = _AUGMENT
            else:
                keys = plan.augment_keys()

        def run() -> None:
            kernels.fill_image_batch(
                checked.image_ids,
                checked.target_ids,
                kernels.HEADER,
                checked.widths,
                checked.lengths,
                checked.labels,
                plan.indices,
                ints,
                out,
                self._pad,
                mode,
                keys,
                prefix,
                stream,
                gain,
                offset,
            )

        return _filled(pool, out, ints, n, plan, run)

    def _collate_compiled(
        self, kernels: ModuleType, gathered: _Gathered, plan: BatchPlan
    ) -> ImageBatch:
        """The compiled path: pixels, pad and ``GainOffset`` in one GIL-free kernel call."""
        images, ids, widths, labels, targets = gathered

        def fill(out: F32Array, out_widths: I32Array) -> None:
            self._fill_compiled(kernels, out, images, ids, widths, out_widths, plan)

        widest = int(widths.max())
        return self._collate_into(images[0].shape, widest, widths, labels, targets, plan, fill)

    def _collate_into(
        self,
        shape: tuple[int, ...],
        widest: int,
        widths: Any,
        labels: Any,
        targets: Sequence[Any],
        plan: BatchPlan,
        fill: Callable[[F32Array, I32Array], None],
    ) -> ImageBatch:
        """Both paths: pooled arrays for the batch, its int32 fields, then ``fill`` the pixels."""
        n = len(targets)
        c, h = shape[0], shape[1]
        lengths = list(map(len, targets))
        total = sum(lengths)
        multiple = self._width_multiple
        wp = -(-widest // multiple) * multiple
        pool = self._pool
        out = pool.acquire((n, c, h, wp), F32)
        ints = pool.acquire((4 * n + total,), I32)

        def run() -> None:
            ints[:n] = widths
            ints[n : 2 * n] = lengths
            ints[2 * n : 3 * n] = labels
            ints[3 * n : 4 * n] = plan.indices
            if total:
                np.concatenate(targets, out=ints[4 * n :], casting="unsafe")
            fill(out, ints[:n])

        return _filled(pool, out, ints, n, plan, run)

    def _fill_compiled(
        self,
        kernels: ModuleType,
        out: F32Array,
        images: list[F32Array],
        ids: npt.NDArray[np.int64],
        widths: npt.NDArray[np.int64],
        width_array: I32Array,
        plan: BatchPlan,
    ) -> None:
        augment, fill, header = self._augment, kernels.fill_images, kernels.HEADER
        if augment is None:
            fill(ids, header, widths, out, self._pad, kernels.COPY_AND_PAD, _NO_KEYS, _F0, _F0)
        elif type(augment) is GainOffset:
            gain, offset = np.float32(augment.gain_std), np.float32(augment.offset_std)
            keys = plan.augment_keys()
            fill(
                ids, header, widths, out, self._pad, kernels.GAIN_OFFSET_AND_PAD, keys, gain, offset
            )
        elif callable(getattr(augment, "augment_batch", None)):
            fill(ids, header, widths, out, self._pad, kernels.COPY_ONLY, _NO_KEYS, _F0, _F0)
            batch_form = cast(BatchAugmentation, augment).augment_batch
            with np.errstate(all="ignore"):
                batch_form(out, width_array, BatchRng(plan.augment_keys()))
            fill(ids, header, widths, out, self._pad, kernels.PAD_ONLY, _NO_KEYS, _F0, _F0)
        else:  # a per-sample Python augmentation: the reference loop
            self._fill(out, images, widths.tolist(), width_array, plan)

    def _fill(
        self,
        out: F32Array,
        images: list[F32Array],
        widths: list[int],
        width_array: I32Array,
        plan: BatchPlan,
    ) -> None:
        wp, pad, augment = out.shape[3], self._pad, self._augment
        padded = min(widths) < wp
        if augment is None:
            if padded:
                out.fill(pad)
            for i, image in enumerate(images):
                out[i, :, :, : widths[i]] = image
            return
        keys = plan.augment_keys()
        batch_form = getattr(augment, "augment_batch", None)
        if callable(batch_form):
            # No fill first: the pad columns are rewritten after the augmentation anyway,
            # so until then they may hold anything (hence no floating-point warnings).
            for i, image in enumerate(images):
                out[i, :, :, : widths[i]] = image
            with np.errstate(all="ignore"):
                batch_form(out, width_array, BatchRng(keys))
            if padded:
                for i, w in enumerate(widths):
                    if w < wp:
                        out[i, :, :, w:] = pad
            return
        c, h = out.shape[1], out.shape[2]
        scratch = self._pool.acquire((c * h * max(widths),), F32)
        try:
            for i, (image, key) in enumerate(zip(images, keys.tolist(), strict=True)):
                w = widths[i]
                view = scratch[: c * h * w].reshape(c, h, w)
                view[...] = image
                augment(view, SampleRng(key))
                out[i, :, :, :w] = view
                if w < wp:
                    out[i, :, :, w:] = pad
        finally:
            self._pool.release(scratch)

    def __repr__(self) -> str:
        return (
            f"ImageBatchCollator(width_multiple={self._width_multiple}, "
            f"pad_value={float(self._pad)!r}, augment={self._augment!r})"
        )


def _filled(
    pool: BufferPool,
    out: F32Array,
    ints: I32Array,
    n: int,
    plan: BatchPlan,
    run: Callable[[], None],
) -> ImageBatch:
    """``run()`` fills the pooled ``out`` and ``ints``: the batch, or both back to the pool."""
    try:
        run()
    except BaseException:
        pool.release(out)
        pool.release(ints)
        raise
    return _image_batch(pool, out, ints, n, plan)


def _image_batch(
    pool: BufferPool, out: F32Array, ints: I32Array, n: int, plan: BatchPlan
) -> ImageBatch:
    """The batch over a filled ``out`` and ``ints`` (widths, lengths, labels, indices, targets)."""
    state = pool.reuse(_ImageState) or _ImageState()
    state.pool, state.buffers = pool, (out, ints)
    state.images, state.widths = out, ints[:n]
    state.target_lengths, state.labels = ints[n : 2 * n], ints[2 * n : 3 * n]
    state.indices, state.targets = ints[3 * n : 4 * n], ints[4 * n :]
    state.stamp(plan)
    batch = ImageBatch.__new__(ImageBatch)
    StepBatch.__init__(batch, state)
    return batch


__all__ = (
    "BatchAugmentation",
    "GainOffset",
    "ImageBatch",
    "ImageBatchCollator",
    "ImageSample",
    "gray8_to_planar",
    "rgb8_to_planar",
)
