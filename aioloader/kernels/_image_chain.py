"""Compiled crop, bilinear resize and flip of 8-bit HWC images: numba, ``nogil``, cached.

``crop_resize_flip`` computes exactly what the core's ``crop_resize_flip_reference``
computes (the formula is in that module's docstring): the same integer arithmetic, one
output pixel at a time, with the GIL released for the whole call. It is compiled (or
loaded from numba's cache) with the other batch kernels (``_cache.load_every_kernel``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types

from ._support import _I64, _U8, _array, _inline, _input
from ._support import Lazy as Lazy
from ._support import kernel as _kernel

Q = 11
"""Fractional bits of a source coordinate: weights are multiples of ``2^-Q``."""
_ONE = 1 << Q
_HALF = 1 << (Q - 1)
_FRACTION = _ONE - 1
_ROUND = 1 << (2 * Q - 1)
_SHIFT = 2 * Q


def load_all() -> None:
    """Compile (or load from the cache) every kernel of this module now."""
    for value in list(globals().values()):
        if isinstance(value, Lazy):
            value.load()


@_inline
def _axis(start: int, length: int, full: int, n: int, m: int, index: Any, fraction: Any) -> None:
    """Source row (or column) and weight of each of ``m`` outputs (see the reference)."""
    den = 2 * m * full
    top = (n - 1) * _ONE
    for i in range(m):
        u = (2 * start * m + (2 * i + 1) * length) * n * _ONE // den - _HALF
        if u < 0:
            u = 0
        elif u > top:
            u = top
        index[i] = u >> Q
        fraction[i] = u & _FRACTION


@_kernel(
    types.void(
        _input(_U8, 3),
        _I64,
        _I64,
        _I64,
        _I64,
        _I64,
        _I64,
        types.boolean,
        _array(_U8, 3),
    )
)
def crop_resize_flip(
    image: Any,
    top: int,
    left: int,
    height: int,
    width: int,
    full_height: int,
    full_width: int,
    flip: bool,
    out: Any,
) -> None:
    """``out`` = the box ``(top, left, height, width)`` of ``image``, resized (and flipped).

    The box is in the coordinates of a ``full_height`` x ``full_width`` image of which
    ``image`` is a (possibly reduced) decoding.
    """
    n_rows, n_cols, channels = image.shape[0], image.shape[1], image.shape[2]
    m_rows, m_cols = out.shape[0], out.shape[1]
    rows = np.empty(m_rows, np.int64)
    row_weights = np.empty(m_rows, np.int64)
    cols = np.empty(m_cols, np.int64)
    col_weights = np.empty(m_cols, np.int64)
    _axis(top, height, full_height, n_rows, m_rows, rows, row_weights)
    _axis(left, width, full_width, n_cols, m_cols, cols, col_weights)
    last_row, last_col = n_rows - 1, n_cols - 1
    for r in range(m_rows):
        y0 = rows[r]
        y1 = min(y0 + 1, last_row)
        g = row_weights[r]
        g0 = _ONE - g
        for c in range(m_cols):
            source = m_cols - 1 - c if flip else c
            x0 = cols[source]
            x1 = min(x0 + 1, last_col)
            f = col_weights[source]
            f0 = _ONE - f
            for k in range(channels):
                t0 = np.int64(image[y0, x0, k]) * f0 + np.int64(image[y0, x1, k]) * f
                t1 = np.int64(image[y1, x0, k]) * f0 + np.int64(image[y1, x1, k]) * f
                out[r, c, k] = (t0 * g0 + t1 * g + _ROUND) >> _SHIFT
