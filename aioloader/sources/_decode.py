"""Decode hooks: ``decode(data, index) -> sample``, called once per sample a source reads.

A decoder marked ``@takes_key`` is called as ``decode(data, index, key)``: it also gets
where the sample came from, the ``Path`` of a local file or the key of an object. Decoders
run on the event loop, so keep them cheap (``np.frombuffer``, ``np.load`` of a small
array); heavy work belongs in the loader's transform, which runs in worker threads, or in
``ImageFolder``, which decodes images in threads of its own.
"""

from __future__ import annotations

import contextlib
import inspect
import io
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from .._compat import add_note
from ..core import callable_name, takes_key, wants_key, warn_signature_read

T = TypeVar("T")
In = TypeVar("In")

_NPY_MAGIC = b"\x93NUMPY"

Decoder = Callable[[bytes, int], T]
"""A function from an object's bytes and the sample's index to the sample."""

K = TypeVar("K")

KeyedDecoder = Callable[[bytes, int, K], T]
"""A decoder that also gets the sample's path or key: ``decode(data, index, key)``."""

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def decoder_takes_key(decode: Callable[..., Any]) -> bool:
    """Whether ``decode`` is called as ``decode(data, index, key)``.

    It is when it is marked ``@takes_key``. An unmarked decoder is called as
    ``decode(data, index)``, except one with three positional parameters (today's form,
    deprecated): it still gets the key, with a ``DeprecationWarning`` (once per function)
    naming the fix. ``*args`` does not count, so a decoder written for ``decode(data,
    index)`` keeps getting exactly two arguments.

    >>> decoder_takes_key(decode_bytes), decoder_takes_key(takes_key(lambda d, i, k: d))
    (False, True)

    Raises:
        TypeError: it is marked ``@takes_key`` but cannot take three positional arguments.
    """
    declared = wants_key(decode)
    try:
        parameters: list[inspect.Parameter] | None = list(
            inspect.signature(decode).parameters.values()
        )
    except (TypeError, ValueError):  # some builtins have no signature
        parameters = None
    positional = 0 if parameters is None else sum(p.kind in _POSITIONAL for p in parameters)
    if declared is not None:
        if (
            declared
            and parameters is not None
            and positional < 3
            and not any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)
        ):
            raise TypeError(
                "decode is marked @takes_key so must accept decode(data, index, key) but "
                f"{callable_name(decode)!r} has the signature {inspect.signature(decode)}"
            )
        return declared
    if positional >= 3:
        warn_signature_read(decode, "decoder", "key", takes_key.__name__)
        return True
    return False


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


def mark_sample_error(error: BaseException, index: int, name: str) -> None:
    """Name the failing sample on ``error``: a note with its index and path or key.

    The dataset index is also kept on the error (``__aioloader_index__``), so the loader
    can add the step and slot of a sample that failed inside a batched read.
    """
    if getattr(error, "__aioloader_index__", None) is not None:
        return  # already named (a nested read)
    with contextlib.suppress(AttributeError):  # an exception type without a __dict__
        error.__aioloader_index__ = index  # type: ignore[attr-defined]
    add_note(error, f"aioloader: reading dataset index {index}: {name}")


@contextlib.contextmanager
def naming_sample(index: int, name: Callable[[], str]) -> Iterator[None]:
    """Any exception inside the block is marked with ``index`` and ``name()``."""
    try:
        yield
    except Exception as error:
        mark_sample_error(error, index, name())
        raise


def decode_named(decode: Callable[..., T], data: In, index: int, name: str, *key: Any) -> T:
    """``decode(data, index, *key)``; a ``ValueError`` it raises is raised again naming
    ``name``. Any other exception keeps its type and gets a note naming the sample.
    """
    try:
        return decode(data, index, *key)
    except ValueError as exc:
        error = ValueError(f"decoding {name} (sample {index}) failed: {exc}")
        mark_sample_error(error, index, name)
        raise error from exc
    except Exception as exc:
        mark_sample_error(exc, index, name)
        raise
