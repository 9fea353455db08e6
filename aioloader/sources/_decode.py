"""Decode hooks: ``decode(data, index) -> sample``, called once per sample a source reads.

A decoder that takes a third positional parameter, ``decode(data, index, key)``, also gets
where the sample came from: the ``Path`` of a local file, the key of an object. Decoders
run on the event loop, so keep them cheap (``np.frombuffer``, ``np.load`` of a small
array); heavy work belongs in the loader's transform, which runs in worker threads, or in
``ImageFolder``, which decodes images in threads of its own.
"""

from __future__ import annotations

import inspect
import io
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

T = TypeVar("T")
In = TypeVar("In")

_NPY_MAGIC = b"\x93NUMPY"

Decoder = Callable[[bytes, int], T]
"""A function from an object's bytes and the sample's index to the sample."""

K = TypeVar("K")

KeyedDecoder = Callable[[bytes, int, K], T]
"""A decoder that also gets the sample's path or key: ``decode(data, index, key)``."""

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def takes_key(decode: Callable[..., Any]) -> bool:
    """Whether ``decode`` has a third positional parameter, for the path or key.

    ``*args`` does not count, so a decoder written for ``decode(data, index)`` keeps
    getting exactly two arguments.

    >>> takes_key(decode_bytes), takes_key(lambda data, index, path: data)
    (False, True)
    """
    try:
        parameters = inspect.signature(decode).parameters.values()
    except (TypeError, ValueError):  # some builtins have no signature
        return False
    return sum(p.kind in _POSITIONAL for p in parameters) >= 3


def decode_bytes(data: bytes, index: int) -> bytes:
    """The raw bytes, unchanged (the default decoder).

    >>> decode_bytes(b"abc", 0)
    b'abc'
    """
    return data


def decode_npy(data: bytes, index: int) -> npt.NDArray[Any]:
    """A NumPy array from ``.npy`` bytes, refusing pickled (object) arrays.

    Raises:
        ValueError: The data is not a ``.npy`` array or holds pickled Python objects.

    >>> buf = io.BytesIO(); np.save(buf, np.arange(3)); decode_npy(buf.getvalue(), 0)
    array([0, 1, 2])
    """
    if not data.startswith(_NPY_MAGIC):
        raise ValueError(
            f"decode_npy needs .npy data, which starts with {_NPY_MAGIC!r}, "
            f"but got bytes starting with {bytes(data[:8])!r}"
        )
    try:
        array: npt.NDArray[Any] = np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as exc:
        if "allow_pickle" not in str(exc):
            raise
        raise ValueError(
            "decode_npy refuses pickled data: the .npy holds Python objects, which only "
            "pickle can load (allow_pickle=False)"
        ) from None
    return array


def decode_named(decode: Callable[..., T], data: In, index: int, name: str, *key: Any) -> T:
    """``decode(data, index, *key)``; a ``ValueError`` it raises is raised again naming
    ``name``."""
    try:
        return decode(data, index, *key)
    except ValueError as exc:
        raise ValueError(f"decoding {name} (sample {index}) failed: {exc}") from exc
