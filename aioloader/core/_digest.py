"""A stable fingerprint of batches: the same bytes, shapes and dtypes give the same digest."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np


def _feed(hasher: Any, value: Any) -> None:
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        hasher.update(f"A{array.dtype.str}{array.shape}".encode())
        hasher.update(array.tobytes())
    elif isinstance(value, np.generic):
        _feed(hasher, np.asarray(value))
    elif hasattr(value, "__digest_fields__"):
        hasher.update(f"O{type(value).__name__}".encode())
        for name, field in value.__digest_fields__():
            hasher.update(f"K{name}".encode())
            _feed(hasher, field)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        hasher.update(f"D{type(value).__name__}".encode())
        for field in dataclasses.fields(value):
            hasher.update(f"K{field.name}".encode())
            _feed(hasher, getattr(value, field.name))
    elif isinstance(value, Mapping):
        hasher.update(f"M{len(value)}".encode())
        for key in sorted(value, key=repr):
            hasher.update(f"K{key!r}".encode())
            _feed(hasher, value[key])
    elif isinstance(value, (list, tuple)):
        hasher.update(f"L{type(value).__name__}{len(value)}".encode())
        for item in value:
            _feed(hasher, item)
    elif isinstance(value, (bool, int, float, complex, str, bytes, type(None))):
        hasher.update(f"S{type(value).__name__}{value!r}".encode())
    else:
        raise TypeError(f"cannot digest a value of type {type(value).__name__}")


def digest_batch(batch: Any) -> str:
    """Hex SHA-256 of every array (dtype, shape, bytes) and scalar in a batch, in order.

    Objects may define ``__digest_fields__() -> iterable of (name, value)``.
    """
    hasher = hashlib.sha256()
    _feed(hasher, batch)
    return hasher.hexdigest()


def digest_stream(batches: Iterable[Any]) -> str:
    """One digest over a sequence of batches."""
    hasher = hashlib.sha256()
    for batch in batches:
        hasher.update(digest_batch(batch).encode())
    return hasher.hexdigest()
