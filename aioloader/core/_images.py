"""Image batches (spec sections 4-5): ``ImageSample``, ``ImageBatch``, ``ImageBatchCollator``.

``ImageBatchCollator`` pads planar float32 images ``[C, H, W_i]`` to one ``[B, C, H, Wp]``
batch drawn from a ``BufferPool``. An augmentation edits each sample in a contiguous scratch
copy with ``SampleRng(derive(seed, e, s, slot, 1))``; one that also offers ``augment_batch``
(such as ``GainOffset``) is applied to the whole batch at once, with the same bits.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt

from ._backend import compiled
from ._check import positive_int
from ._image_ops import BatchAugmentation as BatchAugmentation
from ._image_ops import GainOffset as GainOffset
from ._image_ops import gray8_to_planar as gray8_to_planar
from ._image_ops import rgb8_to_planar as rgb8_to_planar
from ._plan import BatchPlan
from ._pool import BatchField, BatchState, BufferPool, PooledBatch, StepBatch
from ._rng import BatchRng, SampleRng

F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)
INT32_MIN = -(1 << 31)
INT32_LIMIT = 1 << 31
_EMPTY: npt.NDArray[Any] = np.empty(0, np.int32)
_EMPTY.flags.writeable = False

F32Array = npt.NDArray[np.float32]
I32Array = npt.NDArray[np.int32]


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


class _ImageState(BatchState):
    __slots__ = (
        "epoch",
        "global_step",
        "images",
        "indices",
        "labels",
        "step",
        "target_lengths",
        "targets",
        "widths",
    )

    def __init__(self) -> None:
        super().__init__()
        self.clear()

    def clear(self) -> None:
        super().clear()
        self.images: npt.NDArray[Any] = _EMPTY
        self.widths: npt.NDArray[Any] = _EMPTY
        self.targets: npt.NDArray[Any] = _EMPTY
        self.target_lengths: npt.NDArray[Any] = _EMPTY
        self.labels: npt.NDArray[Any] = _EMPTY
        self.indices: npt.NDArray[Any] = _EMPTY
        self.global_step = 0
        self.epoch = 0
        self.step = 0


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
        return int(self._live().images.shape[0])

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


class ImageBatchCollator:
    """Collates ``ImageSample`` objects into an ``ImageBatch`` (spec section 4).

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
        if isinstance(pad_value, bool) or not isinstance(pad_value, (int, float, np.number)):
            raise TypeError(
                f"pad_value must be a real number but got {type(pad_value).__name__} "
                f"({pad_value!r})"
            )
        with np.errstate(over="ignore"):
            self._pad = np.float32(pad_value)
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
        _check_indices(indices)
        kernels = compiled()
        if kernels is not None:
            gathered = _gather_fast(samples, kernels)
            if gathered is not None:
                return self._collate_compiled(kernels, gathered, plan)
        images, widths, labels, targets = _gather(samples, indices)
        c, h = images[0].shape[0], images[0].shape[1]
        lengths = list(map(len, targets))
        total = sum(lengths)
        multiple = self._width_multiple
        wp = -(-max(widths) // multiple) * multiple
        pool = self._pool
        out = pool.acquire((n, c, h, wp), F32)
        ints = pool.acquire((4 * n + total,), I32)
        try:
            ints[:n] = widths
            ints[n : 2 * n] = lengths
            ints[2 * n : 3 * n] = labels
            ints[3 * n : 4 * n] = indices
            if total:
                np.concatenate(targets, out=ints[4 * n :], casting="unsafe")
            self._fill(out, images, widths, ints[:n], plan)
        except BaseException:
            pool.release(out)
            pool.release(ints)
            raise
        state = pool.reuse(_ImageState) or _ImageState()
        state.pool, state.buffers = pool, (out, ints)
        state.images, state.widths = out, ints[:n]
        state.target_lengths, state.labels = ints[n : 2 * n], ints[2 * n : 3 * n]
        state.indices, state.targets = ints[3 * n : 4 * n], ints[4 * n :]
        state.global_step, state.epoch, state.step = plan.global_step, plan.epoch, plan.step
        batch = ImageBatch.__new__(ImageBatch)
        PooledBatch.__init__(batch, state)
        return batch

    def _collate_compiled(
        self, kernels: ModuleType, gathered: _Gathered, plan: BatchPlan
    ) -> ImageBatch:
        """The compiled path: pixels, pad and ``GainOffset`` in one GIL-free kernel call."""
        images, ids, widths, labels, targets = gathered
        n = ids.shape[0]
        c, h = images[0].shape[0], images[0].shape[1]
        lengths = list(map(len, targets))
        total = sum(lengths)
        multiple = self._width_multiple
        wp = -(-int(widths.max()) // multiple) * multiple
        pool = self._pool
        out = pool.acquire((n, c, h, wp), F32)
        ints = pool.acquire((4 * n + total,), I32)
        try:
            ints[:n] = widths
            ints[n : 2 * n] = lengths
            ints[2 * n : 3 * n] = labels
            ints[3 * n : 4 * n] = plan.indices
            if total:
                np.concatenate(targets, out=ints[4 * n :], casting="unsafe")
            self._fill_compiled(kernels, out, images, ids, widths, ints[:n], plan)
        except BaseException:
            pool.release(out)
            pool.release(ints)
            raise
        state = pool.reuse(_ImageState) or _ImageState()
        state.pool, state.buffers = pool, (out, ints)
        state.images, state.widths = out, ints[:n]
        state.target_lengths, state.labels = ints[n : 2 * n], ints[2 * n : 3 * n]
        state.indices, state.targets = ints[3 * n : 4 * n], ints[4 * n :]
        state.global_step, state.epoch, state.step = plan.global_step, plan.epoch, plan.step
        batch = ImageBatch.__new__(ImageBatch)
        PooledBatch.__init__(batch, state)
        return batch

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
            with np.errstate(all="ignore"):
                augment.augment_batch(out, width_array, BatchRng(plan.augment_keys()))  # type: ignore[attr-defined]
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


def _check_indices(indices: npt.NDArray[Any]) -> None:
    if indices.dtype.kind not in "iu":
        raise TypeError(f"plan.indices must hold integers but got dtype {indices.dtype}")
    low, high = int(indices.min()), int(indices.max())
    if low < 0 or high >= INT32_LIMIT:
        bad = low if low < 0 else high
        slot = int(np.flatnonzero(indices == bad)[0])
        raise ValueError(
            f"dataset index must fit int32 as an index in [0, 2^31) but got {bad} at slot {slot}"
        )


_Gathered = tuple[
    list[F32Array], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], list[Any]
]
_NO_KEYS = np.empty(0, np.uint64)
_F0 = np.float32(0.0)
_IMAGE, _TARGET, _LABEL = (operator.attrgetter(name) for name in ("image", "target", "label"))
_DTYPE, _NDIM = operator.attrgetter("dtype"), operator.attrgetter("ndim")


def _gather_fast(samples: Sequence[ImageSample], kernels: ModuleType) -> _Gathered | None:
    """Whole-batch checks (C-level ``map`` and one kernel), ``None`` on anything unusual.

    ``None`` sends the batch to ``_gather``, which accepts the same inputs and raises the
    same errors as always; here nothing raises.
    """
    try:
        images = list(map(_IMAGE, samples))
        targets = list(map(_TARGET, samples))
        labels = list(map(_LABEL, samples))
    except AttributeError:
        return None
    ndarray = np.ndarray
    if (
        set(map(type, images)) != {ndarray}
        or set(map(_DTYPE, images)) != {F32}
        or set(map(_NDIM, images)) != {3}
        or set(map(type, labels)) != {int}
    ):
        return None
    kinds = set(map(type, targets))
    if kinds == {ndarray}:
        if set(map(_DTYPE, targets)) != {I32} or set(map(_NDIM, targets)) != {1}:
            return None
    elif kinds != {tuple} or any(targets):
        return None
    try:
        label_array = np.fromiter(labels, np.int64, len(labels))
    except OverflowError:
        return None
    if int(label_array.min()) < INT32_MIN or int(label_array.max()) >= INT32_LIMIT:
        return None
    ids = np.fromiter(map(id, images), np.int64, len(images))
    widths = np.empty(len(images), np.int64)
    if kernels.image_widths(ids, kernels.HEADER, widths) >= 0:
        return None
    return images, ids, widths, label_array, targets


def _gather(
    samples: Sequence[ImageSample], indices: npt.NDArray[Any]
) -> tuple[list[F32Array], list[int], list[int], list[npt.NDArray[Any]]]:
    """Check every sample; the common case costs a few attribute reads and comparisons."""
    images: list[F32Array] = []
    widths: list[int] = []
    labels: list[int] = []
    targets: list[npt.NDArray[Any]] = []
    ndarray, f32, i32 = np.ndarray, F32, I32
    first: tuple[int, ...] = ()
    for slot, sample in enumerate(samples):
        try:
            image, target, label = sample.image, sample.target, sample.label
        except AttributeError:
            raise TypeError(
                f"samples[{slot}] must be an ImageSample but got {type(sample).__name__}"
            ) from None
        if type(image) is not ndarray or image.dtype is not f32 or image.ndim != 3:
            image = _check_image(slot, indices, image)
        shape = image.shape
        if not first:
            first = shape
        if shape[0] != first[0] or shape[1] != first[1] or shape[2] < 1:
            _shape_error(slot, indices, first, shape)
        images.append(image)
        widths.append(shape[2])
        if type(label) is not int or not INT32_MIN <= label < INT32_LIMIT:
            label = _check_label(slot, indices, label)
        labels.append(label)
        if type(target) is not ndarray or target.dtype is not i32 or target.ndim != 1:
            target = _check_target(slot, indices, target)
        targets.append(target)
    return images, widths, labels, targets


def _where(slot: int, indices: npt.NDArray[Any], field: str) -> str:
    return f"samples[{slot}].{field} (dataset index {int(indices[slot])})"


def _shape_error(
    slot: int, indices: npt.NDArray[Any], first: tuple[int, ...], shape: tuple[int, ...]
) -> NoReturn:
    if shape[2] < 1:
        raise ValueError(
            f"image width must be >= 1 but dataset index {int(indices[slot])} has shape {shape}"
        )
    raise ValueError(
        "samples of one batch must share C and H but dataset index "
        f"{int(indices[0])} has shape {first} and dataset index {int(indices[slot])} "
        f"has shape {shape}"
    )


def _check_image(slot: int, indices: npt.NDArray[Any], image: Any) -> F32Array:
    where = _where(slot, indices, "image")
    if not isinstance(image, np.ndarray):
        raise TypeError(f"{where} must be a numpy float32 array but got {type(image).__name__}")
    if image.dtype != F32:
        raise TypeError(f"{where} must have dtype float32 but got {image.dtype}")
    if image.ndim != 3:
        raise ValueError(f"{where} must be 3-D [C, H, W] but got shape {image.shape}")
    return image


def _check_label(slot: int, indices: npt.NDArray[Any], label: Any) -> int:
    where = _where(slot, indices, "label")
    if isinstance(label, (bool, np.bool_)) or not isinstance(label, (int, np.integer)):
        raise TypeError(f"{where} must be an int32 but got {type(label).__name__} ({label!r})")
    if not INT32_MIN <= int(label) < INT32_LIMIT:
        raise ValueError(f"{where} must fit int32 in [-2^31, 2^31) but got {int(label)}")
    return int(label)


def _check_target(slot: int, indices: npt.NDArray[Any], target: Any) -> npt.NDArray[Any]:
    if type(target) is tuple and not target:
        return _EMPTY
    where = _where(slot, indices, "target")
    array = np.asarray(target)
    if array.ndim != 1:
        raise ValueError(f"{where} must be a 1-D sequence of int32 but got shape {array.shape}")
    if array.size == 0:
        return _EMPTY
    if array.dtype.kind not in "iu":
        raise TypeError(f"{where} must hold integers but got dtype {array.dtype}")
    if array.dtype != I32:
        low, high = int(array.min()), int(array.max())
        if low < INT32_MIN or high >= INT32_LIMIT:
            bad = low if low < INT32_MIN else high
            raise ValueError(f"{where} must hold int32 values but holds {bad}")
    return array


__all__ = [
    "BatchAugmentation",
    "GainOffset",
    "ImageBatch",
    "ImageBatchCollator",
    "ImageSample",
    "gray8_to_planar",
    "rgb8_to_planar",
]
