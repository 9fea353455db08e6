"""Default collation of nested samples: ``torch.utils.data.default_collate``, in numpy.

The structure of one sample is mirrored: a list of dicts becomes a dict of batched values,
a namedtuple stays a namedtuple, a tuple becomes a list, a list stays a list; numpy arrays
are stacked, Python floats become float64, ints int64, bools bool, numpy scalars keep their
dtype, and strings stay as they are. Where torch would produce a tensor this produces a
numpy array of the same dtype and values.
"""

from __future__ import annotations

import collections.abc
import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import CollateError
from ._check import REAL, instance_not_bool
from ._markers import takes_plan
from ._plan import BatchPlan
from ._samplers import IndexArray

COLLATE_ERROR = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"
)
EQUAL_SIZE_ERROR = "each element in list of batch should be of equal size"
_STRING_OR_OBJECT = re.compile(r"[SaUO]")
_INT64_MIN, _INT64_LIMIT = -(1 << 63), 1 << 63


def _stack(batch: Sequence[Any]) -> np.ndarray[Any, Any]:
    elem = batch[0]
    if _STRING_OR_OBJECT.search(elem.dtype.str) is not None:
        raise TypeError(COLLATE_ERROR.format(elem.dtype))
    arrays = [np.asarray(b) for b in batch]
    for k, array in enumerate(arrays):
        if array.shape != arrays[0].shape:
            raise CollateError(
                "stack expects each tensor to be equal size, but got "
                f"{list(arrays[0].shape)} at entry 0 and {list(array.shape)} at entry {k}"
            )
    return np.stack(arrays)


def _python_numbers(batch: Sequence[Any]) -> np.ndarray[Any, Any]:
    """``torch.tensor(batch)`` for Python ints and bools: bool, else int64 (float32 if mixed)."""
    values = list(batch)
    if all(type(v) is bool for v in values):
        return np.array(values, dtype=np.bool_)
    if all(isinstance(v, (int, np.integer)) for v in values):
        for v in values:
            if not _INT64_MIN <= int(v) < _INT64_LIMIT:
                raise ValueError(f"batch values must fit int64 but got {int(v)}")
        return np.array(values, dtype=np.int64)
    if all(isinstance(v, (int, float, np.integer, np.floating)) for v in values):
        with np.errstate(over="ignore"):  # like torch: out-of-range floats become inf
            return np.array(values, dtype=np.float32)
    raise TypeError(f"batch values must be numbers but got {[type(v).__name__ for v in values]}")


def _require_numbers(batch: Sequence[Any]) -> None:
    for k, value in enumerate(batch):
        instance_not_bool(f"batch[{k}]", value, REAL, "a number like batch[0]")


def default_collate(batch: Sequence[Any]) -> Any:
    """Collate a list of samples as ``torch.utils.data.default_collate`` does, into numpy.

    >>> out = default_collate([{"x": 1.5, "y": (1, "a")}, {"x": 2.0, "y": (2, "b")}])
    >>> out["x"], out["y"]
    (array([1.5, 2. ]), [array([1, 2]), ('a', 'b')])
    """
    if len(batch) == 0:
        raise ValueError("batch must hold at least one sample but got none")
    elem = batch[0]
    kind = type(elem)
    if isinstance(elem, np.ndarray):
        return _stack(batch)
    if isinstance(elem, (np.bool_, np.number, np.object_)):
        return np.array(list(batch))
    if isinstance(elem, float):
        _require_numbers(batch)
        return np.array(list(batch), dtype=np.float64)
    if isinstance(elem, int):
        return _python_numbers(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        for k, other in enumerate(batch):
            if not isinstance(other, collections.abc.Mapping):
                raise TypeError(
                    f"batch[{k}] must be a mapping like batch[0] but got {type(other).__name__}"
                )
            missing = [key for key in elem if key not in other]
            if missing:
                raise ValueError(
                    f"batch[{k}] must have the keys of batch[0] but lacks {missing[:3]!r}"
                )
        values = {key: default_collate([d[key] for d in batch]) for key in elem}
        try:
            if isinstance(elem, collections.abc.MutableMapping):
                clone = copy.copy(elem)
                clone.update(values)
                return clone
            return kind(values)
        except TypeError:
            return values
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return kind(*(default_collate(field) for field in zip(*batch, strict=False)))
    if isinstance(elem, collections.abc.Sequence):
        for k, other in enumerate(batch):
            if isinstance(other, (str, bytes)) or not isinstance(other, collections.abc.Sequence):
                raise TypeError(
                    f"batch[{k}] must be a sequence like batch[0] but got {type(other).__name__}"
                )
        size = len(elem)
        if any(len(other) != size for other in batch):
            raise CollateError(EQUAL_SIZE_ERROR)
        columns = [default_collate(column) for column in zip(*batch, strict=True)]
        if isinstance(elem, tuple):
            return columns
        try:
            if isinstance(elem, collections.abc.MutableSequence):
                cloned = copy.copy(elem)
                for i, column in enumerate(columns):
                    cloned[i] = column
                return cloned
            return kind(columns)
        except TypeError:
            return columns
    raise TypeError(COLLATE_ERROR.format(kind))


@dataclass(frozen=True, slots=True)
class TreeBatch:
    """A batch of nested samples.

    Attributes:
        data: ``default_collate(samples)``.
        global_step: The global step of the batch.
        epoch: Epoch of the batch.
        step: Step in the epoch.
        indices: int64 dataset indices, in slot order.
    """

    data: Any
    global_step: int
    epoch: int
    step: int
    indices: IndexArray

    def release(self) -> None:
        """Nothing to return: the arrays are the batch's own (kept for a uniform API)."""

    def __enter__(self) -> TreeBatch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


@takes_plan
class TreeCollator:
    """A ``Collator`` for nested samples (dicts, tuples, namedtuples, arrays, numbers).

    >>> plan = BatchPlan(0, 7, 1, 2, np.array([3, 5]))
    >>> batch = TreeCollator()([{"a": 1}, {"a": 2}], plan)
    >>> batch.data["a"].tolist(), batch.global_step
    ([1, 2], 7)
    """

    __slots__ = ()

    def __call__(self, samples: Sequence[Any], plan: BatchPlan) -> TreeBatch:
        """Collate the samples of ``plan``."""
        if plan.indices.shape != (len(samples),):
            raise ValueError(
                f"plan.indices must hold one index per sample ({len(samples)}) but got shape "
                f"{plan.indices.shape}"
            )
        return TreeBatch(
            default_collate(samples), plan.global_step, plan.epoch, plan.step, plan.indices
        )

    def __repr__(self) -> str:
        return "TreeCollator()"


__all__ = ("TreeBatch", "TreeCollator", "default_collate")
