"""Argument checks shared by the core: messages name the argument, the rule and the value."""

from __future__ import annotations

import math
import operator
import reprlib
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

U64_LIMIT = 1 << 64
T = TypeVar("T")
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 40


def seen(value: Any) -> str:
    """What a value is, for the "but got ..." of an error: its type and a short repr.

    >>> seen("x")
    "str ('x')"
    """
    return f"{type(value).__name__} ({_SHORT.repr(value)})"


def _describe_limit(limit: int) -> str:
    if limit > 0 and limit & (limit - 1) == 0:
        return f"2^{limit.bit_length() - 1}"
    return str(limit)


def _index(rule: str, value: Any) -> int:
    """``value`` as a Python int, or a ``TypeError`` reading "<rule> but got ..."."""
    if isinstance(value, bool):
        raise TypeError(f"{rule} but got a bool ({value!r})")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{rule} but got {type(value).__name__} ({value!r})") from None


def as_int(name: str, value: Any) -> int:
    """Return ``value`` as a Python int, refusing bools, floats and other non-integers."""
    if type(value) is int:  # the common case, on every step's path: no call, no message
        return value
    return _index(f"{name} must be an integer", value)


def at_least(name: str, value: Any, minimum: int) -> int:
    """Return ``value`` as an int >= ``minimum``; both errors state the whole rule.

    >>> at_least("threads", 0, 1)
    Traceback (most recent call last):
    ValueError: threads must be an integer >= 1 but got 0
    """
    return _at_least(f"{name} must be an integer >= {minimum}", value, minimum)


def at_least_or_none(name: str, value: Any, minimum: int) -> int | None:
    """Return None, or ``value`` as an int >= ``minimum``."""
    if value is None:
        return None
    return _at_least(f"{name} must be an integer >= {minimum} or None", value, minimum)


def _at_least(rule: str, value: Any, minimum: int) -> int:
    number = _index(rule, value)
    if number < minimum:
        raise ValueError(f"{rule} but got {number}")
    return number


REAL = (int, float, np.integer, np.floating)


def instance_not_bool(name: str, value: Any, kinds: tuple[type, ...], what: str) -> Any:
    """Return ``value`` if it is one of ``kinds`` but not a bool, else "<name> must be <what>".

    ``isinstance(True, int)`` holds, so every check for a number must refuse bools itself.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, kinds):
        raise TypeError(f"{name} must be {what} but got {seen(value)}")
    return value


def real(name: str, value: Any) -> Any:
    """Return ``value`` if it is a real number (Python or numpy int or float, not a bool)."""
    return instance_not_bool(name, value, REAL, "a real number")


def flag(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool (not merely truthy) or raise a clear error."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool but got {type(value).__name__}")
    return value


def int_in_range(name: str, value: Any, low: int, high: int) -> int:
    """Return ``value`` as an int in ``[low, high)`` or raise a clear error."""
    number = as_int(name, value)
    if not low <= number < high:
        raise ValueError(
            f"{name} must be an integer in [{low}, {_describe_limit(high)}) but got {number}"
        )
    return number


def u64(name: str, value: Any) -> int:
    """Return ``value`` as an unsigned 64-bit integer or raise a clear error."""
    return int_in_range(name, value, 0, U64_LIMIT)


def positive_int(name: str, value: Any, high: int = 1 << 63) -> int:
    """Return ``value`` as an int in ``[1, high)``."""
    return int_in_range(name, value, 1, high)


def positive(name: str, value: Any) -> int:
    """Return ``value`` as an int >= 1 (no upper bound)."""
    number = as_int(name, value)
    if number < 1:
        raise ValueError(f"{name} must be >= 1 but got {number}")
    return number


def positive_up_to(name: str, value: Any, limit: int) -> int:
    """Return ``value`` as an int in ``[1, limit]`` (the limit included)."""
    number = as_int(name, value)
    if not 1 <= number <= limit:
        raise ValueError(f"{name} must be an integer in [1, {limit}] but got {number}")
    return number


def number(name: str, value: Any) -> Any:
    """Return ``value`` if it is a single number (bool, int, float, complex, numpy scalar)."""
    if not isinstance(value, (bool, int, float, complex, np.number, np.bool_)):
        raise TypeError(f"{name} must be a number but got {seen(value)}")
    return value


def instance_or_none(name: str, value: Any, kind: type[T]) -> T | None:
    """Return ``value`` if it is None or a ``kind``, else a clear ``TypeError``."""
    if value is not None and not isinstance(value, kind):
        raise TypeError(f"{name} must be a {kind.__name__} or None but got {seen(value)}")
    return value


def finite_non_negative(name: str, value: Any) -> float:
    """Return ``value`` as a float that is finite and >= 0."""
    number = float(real(name, value))
    if math.isnan(number) or math.isinf(number) or number < 0:
        raise ValueError(f"{name} must be finite and >= 0 but got {number!r}")
    return number


def sequence_1d(name: str, value: Any, what: str) -> list[Any]:
    """Return a one-dimensional sequence (list, tuple or 1-d array) as a list."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, np.ndarray)):
        raise TypeError(f"{name} must be a sequence of {what} but got {type(value).__name__}")
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise TypeError(f"{name} must be one-dimensional but got an array of shape {value.shape}")
    return list(value)


def lengths_1d(name: str, lengths: Any) -> npt.NDArray[np.int64]:
    """``lengths`` as a 1-D int64 array of values >= 0, or a clear error."""
    try:
        array = np.asarray(lengths)
    except (ValueError, TypeError):  # ragged, or not array-like
        raise TypeError(
            f"{name} must be a 1-D sequence of integers but got {seen(lengths)}"
        ) from None
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise TypeError(
            f"{name} must be a 1-D sequence of integers but got {array.dtype} "
            f"with shape {array.shape}"
        )
    result = array.astype(np.int64)
    if result.size and int(result.min()) < 0:
        raise ValueError(f"{name} must be >= 0 but got {int(result.min())}")
    return result


MAX_BATCH_SIZE = 1 << 24


def batch_size_arg(value: Any) -> int:
    """A batch size in ``[1, 2^24]``: larger batches would not fit in memory as indices."""
    number = as_int("batch_size", value)
    if not 1 <= number <= MAX_BATCH_SIZE:
        raise ValueError(f"batch_size must be an integer in [1, 2^24] but got {number}")
    return number
