"""Per-sample checks of an image batch: one pass over the batch, clear errors.

``_gather_checked`` reads the three fields with C-level ``map`` calls and leaves every
check to one compiled kernel (no GIL); ``_gather_fast`` checks a whole batch with C-level
``map`` calls and one compiled kernel. Both decline (return ``None``) on anything unusual;
``_gather`` is the reference, a loop over the slots that accepts the same inputs and raises
an error naming the slot, the dataset index, the field, the rule and the value seen.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from types import ModuleType
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt

from ._check import instance_not_bool

F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)
INT32_MIN = -(1 << 31)
INT32_LIMIT = 1 << 31
_EMPTY: npt.NDArray[Any] = np.empty(0, np.int32)
_EMPTY.flags.writeable = False

F32Array = npt.NDArray[np.float32]
I32Array = npt.NDArray[np.int32]
_LABEL_TYPES = {int, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32}


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
_IMAGE, _TARGET, _LABEL = (operator.attrgetter(name) for name in ("image", "target", "label"))
_DTYPE, _NDIM = operator.attrgetter("dtype"), operator.attrgetter("ndim")


_F32_DTYPE_ID, _I32_DTYPE_ID, _ARRAY_TYPE_ID = id(F32), id(I32), id(np.ndarray)
_I64 = np.dtype(np.int64)


class _Checked:
    """A batch that ``check_image_batch`` accepted: what ``fill_image_batch`` needs.

    ``images`` and ``targets`` keep the arrays alive while the kernels read them by id.
    """

    __slots__ = ("image_ids", "images", "labels", "lengths", "target_ids", "targets", "widths")

    def __init__(self, images: list[Any], targets: list[Any], labels: npt.NDArray[np.int64]):
        n = len(images)
        self.images, self.targets, self.labels = images, targets, labels
        self.image_ids = np.fromiter(map(id, images), np.int64, n)
        self.widths = np.empty(n, np.int64)
        self.lengths = np.empty(n, np.int64)
        self.target_ids = _NO_IDS


_NO_IDS = np.empty(0, np.int64)


def _fields(samples: Sequence[Any]) -> tuple[list[Any], list[Any], list[Any]] | None:
    """The samples' images, targets and labels (three C-level ``map`` calls), or ``None``."""
    try:
        return (
            list(map(_IMAGE, samples)),
            list(map(_TARGET, samples)),
            list(map(_LABEL, samples)),
        )
    except AttributeError:
        return None


def _gather_checked(
    samples: Sequence[Any], indices: npt.NDArray[Any], kernels: ModuleType
) -> tuple[_Checked, int, int] | None:
    """The batch's fields checked by one kernel call: ``(fields, widest, total targets)``.

    ``None`` (nothing raised) on anything the kernel does not take: the caller goes on to
    ``_gather_fast`` and the reference, which accept the same inputs and raise the errors.
    Only the attribute reads and the labels' Python types hold the GIL.
    """
    if type(indices) is not np.ndarray or indices.dtype != _I64 or indices.ndim != 1:
        return None
    if not indices.flags.c_contiguous:
        return None
    fields = _fields(samples)
    if fields is None:
        return None
    images, targets, labels = fields
    if not set(map(type, labels)) <= _LABEL_TYPES:
        return None
    try:
        label_array = np.fromiter(labels, np.int64, len(labels))
    except OverflowError:
        return None
    checked = _Checked(images, targets, label_array)
    if type(targets[0]) is tuple:
        if set(map(type, targets)) != {tuple} or any(targets):
            return None
    else:
        checked.target_ids = np.fromiter(map(id, targets), np.int64, len(targets))
    totals = np.empty(2, np.int64)
    dtype_ids = (_F32_DTYPE_ID, _I32_DTYPE_ID)
    for attempt in range(2):
        declined = kernels.check_image_batch(
            checked.image_ids,
            checked.target_ids,
            label_array,
            indices,
            kernels.HEADER,
            _ARRAY_TYPE_ID,
            *dtype_ids,
            checked.widths,
            checked.lengths,
            totals,
        )
        if declined < 0:
            return checked, int(totals[0]), int(totals[1])
        if attempt:
            return None
        # Arrays that were unpickled share a dtype object equal to, but not, numpy's own:
        # one more try with those (a batch of mixed dtype objects takes the slower path).
        image_dtype = _only_dtype(images, F32)
        target_dtype = _only_dtype(targets, I32) if checked.target_ids.size else I32
        if image_dtype is None or target_dtype is None:
            return None
        retry = (id(image_dtype), id(target_dtype))
        if retry == dtype_ids:
            return None
        dtype_ids = retry
    return None


def _only_dtype(arrays: list[Any], dtype: np.dtype[Any]) -> np.dtype[Any] | None:
    """The one dtype object of ``arrays`` when it equals ``dtype``, else ``None``."""
    try:
        found = set(map(_DTYPE, arrays))
    except AttributeError:
        return None
    if len(found) != 1:
        return None
    (only,) = found
    return only if only == dtype else None


def _gather_fast(samples: Sequence[Any], kernels: ModuleType) -> _Gathered | None:
    """Whole-batch checks (C-level ``map`` and one kernel), ``None`` on anything unusual.

    ``None`` sends the batch to ``_gather``, which accepts the same inputs and raises the
    same errors as always; here nothing raises.
    """
    fields = _fields(samples)
    if fields is None:
        return None
    images, targets, labels = fields
    ndarray = np.ndarray
    if (
        set(map(type, images)) != {ndarray}
        or set(map(_DTYPE, images)) != {F32}
        or set(map(_NDIM, images)) != {3}
        or not set(map(type, labels)) <= _LABEL_TYPES
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
    samples: Sequence[Any], indices: npt.NDArray[Any]
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
        "every image of one batch must share C and H but dataset index "
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
    instance_not_bool(where, label, (int, np.integer), "an int32")
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
