"""The machinery under the kernels: lazy compilation, numba types, raw memory reads.

A sample reaches a kernel as the ``id()`` of its numpy array, the address of its
``PyArrayObject``; ``_data``, ``_ndim``, ``_dim``, ``_stride``, ``_descr`` and
``_c_contiguous`` read numpy's public object layout (``PyArrayObject_fields``: ``data``,
``nd``, ``dimensions``, ``strides``, ``base``, ``descr`` right after the object header);
``_type`` reads any object's ``ob_type``, the header's last field. ``HEADER`` is the
header's size, checked against a probe array when this module loads (``None`` if the
layout is not the expected one, and then the kernels are not used).

numba's cache is keyed on the source of ``_batch.py`` and ``_image_chain.py`` only: after
editing this module, bump ``_batch.SUPPORT_VERSION`` so that the cached kernels are recompiled.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

F = TypeVar("F", bound=Callable[..., Any])


_LOCK = threading.Lock()


class Lazy:
    """A kernel compiled (or loaded from numba's cache) on its first call, then swapped in.

    Loading only what a run uses keeps the first batch short: each cached kernel costs
    tens of milliseconds to load, a compilation seconds.
    """

    def __init__(self, function: Callable[..., Any], signature: Any) -> None:
        self.function, self.signature = function, signature
        self.__name__ = self.__qualname__ = function.__name__
        self.__doc__ = function.__doc__

    def __call__(self, *args: Any) -> Any:
        return self.load()(*args)

    def load(self) -> Any:
        """The compiled dispatcher (the module attribute is replaced by it)."""
        namespace = sys.modules[self.function.__module__].__dict__
        with _LOCK:
            current = namespace[self.__name__]
            if current is self:
                current = numba.njit(self.signature, nogil=True, cache=True)(self.function)
                namespace[self.__name__] = current
        return current


def kernel(signature: Any) -> Callable[[F], F]:
    def register(function: F) -> F:
        return cast(F, Lazy(function, signature))

    return register


def _array(dtype: Any, ndim: int, layout: str = "C", *, readonly: bool = False) -> Any:
    """A numba array type; inputs are read-only so read-only arrays (and others) match."""
    array_type: Any = types.Array
    return array_type(dtype, ndim, layout, readonly=readonly)


def _input(dtype: Any, ndim: int = 1, layout: str = "C") -> Any:
    return _array(dtype, ndim, layout, readonly=True)


_I64, _I32, _U8, _F32, _BOOL = types.int64, types.int32, types.uint8, types.float32, types.boolean


_inline = cast(Callable[[F], F], numba.njit(inline="always"))


# -- raw memory: integer address -> value or pointer ------------------------------------
def _pointer_to(dtype: Any) -> Any:
    def pointer(typingctx: Any, address: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

        pointer_type: Any = types.CPointer
        return pointer_type(dtype)(types.int64), codegen

    return pointer


def _load_of(dtype: Any) -> Any:
    def load(typingctx: Any, address: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            target = context.get_value_type(dtype).as_pointer()
            return builder.load(builder.inttoptr(args[0], target))

        return dtype(types.int64), codegen

    return load


_f32_pointer: Any = intrinsic(_pointer_to(types.float32))
_u8_pointer: Any = intrinsic(_pointer_to(types.uint8))
_load_i64: Any = intrinsic(_load_of(types.int64))
_load_i32: Any = intrinsic(_load_of(types.int32))
_load_f32: Any = intrinsic(_load_of(types.float32))


def _find_header() -> int | None:
    """Size of the object header before ``PyArrayObject.data``; ``None`` if not as expected."""
    probe = np.zeros((2, 3, 5), np.float32)[:, ::-1, 1::2]
    base = object.__basicsize__
    start = id(probe) + base
    if ctypes.c_int64.from_address(start).value != probe.__array_interface__["data"][0]:
        return None
    if ctypes.c_int32.from_address(start + 8).value != probe.ndim:
        return None
    dims = ctypes.c_int64.from_address(start + 16).value
    strides = ctypes.c_int64.from_address(start + 24).value
    for k in range(3):
        if ctypes.c_int64.from_address(dims + 8 * k).value != probe.shape[k]:
            return None
        if ctypes.c_int64.from_address(strides + 8 * k).value != probe.strides[k]:
            return None
    if ctypes.c_int64.from_address(start + 40).value != id(probe.dtype):
        return None
    if ctypes.c_int64.from_address(id(probe) + base - 8).value != id(np.ndarray):
        return None
    return base


HEADER = _find_header()


@_inline
def _data(obj: int, header: int) -> Any:
    return _load_i64(obj + header)


@_inline
def _dim(obj: int, header: int, axis: int) -> Any:
    return _load_i64(_load_i64(obj + header + 16) + 8 * axis)


@_inline
def _type(obj: int, header: int) -> Any:
    """The address of any object's type (``ob_type``, the last field of its header)."""
    return _load_i64(obj + header - 8)


@_inline
def _ndim(obj: int, header: int) -> Any:
    return _load_i32(obj + header + 8)


@_inline
def _descr(obj: int, header: int) -> Any:
    """The address of an array's dtype object."""
    return _load_i64(obj + header + 40)


@_inline
def _stride(obj: int, header: int, axis: int) -> Any:
    return _load_i64(_load_i64(obj + header + 24) + 8 * axis)


@_inline
def _c_contiguous(obj: int, header: int, itemsize: int) -> bool:
    """numpy's rule: strides match a C layout, ignoring axes of length 1; empty passes."""
    nd = _load_i32(obj + header + 8)
    expected = itemsize
    ok = True
    for axis in range(nd - 1, -1, -1):
        size = _dim(obj, header, axis)
        if size == 0:
            return True
        if size != 1 and _stride(obj, header, axis) != expected:
            ok = False
        expected *= size
    return ok
