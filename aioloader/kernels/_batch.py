"""Compiled batch kernels: numba, ``nogil``, cached on disk; the numpy code is the reference.

Each kernel builds a whole batch with the GIL released, so worker threads run side by side.
The samples are separate numpy arrays: the caller passes their ``id()`` and keeps them alive
for the call; the kernel reads data pointer, shape and strides through ``_support``.
Kernels that validate return ``-1`` when done or the first offending position, and write
nothing in that case, so the caller can run the reference code, which raises the
reference error.

Each kernel has one signature; it is compiled on its first call, or loaded from numba's
cache (``__pycache__`` next to this file, or the user-wide cache numba picks when that is
read-only; ``NUMBA_CACHE_DIR`` overrides both). ``load_all()`` does all of them at once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types
from numba.np.numpy_support import carray

from ._support import (
    _BOOL,
    _F32,
    _I32,
    _I64,
    _U8,
    _array,
    _c_contiguous,
    _data,
    _descr,
    _dim,
    _f32_pointer,
    _inline,
    _input,
    _load_f32,
    _load_i32,
    _ndim,
    _stride,
    _type,
    _u8_pointer,
)
from ._support import HEADER as HEADER
from ._support import Lazy as Lazy
from ._support import kernel as _kernel

SUPPORT_VERSION = 2  # bump when _support.py changes: numba's cache keys on this file

_U_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_U_C1 = np.uint64(0xBF58476D1CE4E5B9)
_U_C2 = np.uint64(0x94D049BB133111EB)
_U_27, _U_30, _U_31, _U_40 = np.uint64(27), np.uint64(30), np.uint64(31), np.uint64(40)
_SINGLE_SCALE = np.float32(2.0**-24)
_ZERO, _ONE, _SIX = np.float32(0.0), np.float32(1.0), np.float32(6.0)
_INT32_MIN, _INT32_LIMIT = -(1 << 31), 1 << 31

# fill_images modes
COPY_AND_PAD = 0
GAIN_OFFSET_AND_PAD = 1
COPY_ONLY = 2
PAD_ONLY = 3


def load_all() -> None:
    """Compile (or load from the cache) every kernel now, e.g. to fill the cache ahead."""
    for value in list(globals().values()):
        if isinstance(value, Lazy):
            value.load()


# -- random numbers: SampleRng.next_normal, exactly --------------------------------------
@_inline
def _next_normal(state: np.uint64) -> tuple[np.float32, np.uint64]:
    """Twelve ``next_single`` draws summed left to right in float32, minus 6."""
    acc = _ZERO
    for _ in range(12):
        state = state + _U_GOLDEN
        z = state
        z = (z ^ (z >> _U_30)) * _U_C1
        z = (z ^ (z >> _U_27)) * _U_C2
        z = z ^ (z >> _U_31)
        acc = acc + np.float32(z >> _U_40) * _SINGLE_SCALE
    return acc - _SIX, state


# -- keyed permutation (the samplers' order) ---------------------------------------------
@_inline
def _mix(x: np.uint64) -> np.uint64:
    z = x + _U_GOLDEN
    z = (z ^ (z >> _U_30)) * _U_C1
    z = (z ^ (z >> _U_27)) * _U_C2
    return z ^ (z >> _U_31)  # type: ignore[no-any-return]


@_kernel(
    types.void(
        _input(types.uint64),
        _array(types.uint64, 1),
        types.uint64,
        types.uint64,
        types.uint64,
        _input(types.uint64),
    )
)
def permute(
    positions: Any, out: Any, size: np.uint64, half: np.uint64, mask: np.uint64, keys: Any
) -> None:
    """``keyed_permutation`` of every position: 4-round Feistel passes until below ``size``."""
    for i in range(positions.shape[0]):
        x = positions[i]
        while True:
            left, right = x >> half, x & mask
            for r in range(4):
                left, right = right, left ^ (_mix(right ^ keys[r]) & mask)
            x = (left << half) | right
            if x < size:
                break
        out[i] = x


# -- packing: first fit over a max-tree of the rows' room --------------------------------
@_kernel(_I64(_input(_I64), _I64, _array(_I64, 1), _array(_I64, 1)))
def first_fit_rows(sizes: Any, capacity: int, rows: Any, tree: Any) -> int:
    """Row of each item, taken in the given order: the lowest-numbered row with room.

    ``tree`` (scratch, ``2 x`` a power of two) holds the most room below each node; rows
    not used yet have all of ``capacity``. Returns -1, or the first item no row of the
    tree can take (the caller then runs the reference code).
    """
    leaves = tree.shape[0] // 2
    tree[:] = capacity
    for i in range(sizes.shape[0]):
        size = sizes[i]
        if tree[1] < size:
            return i
        node = 1
        while node < leaves:
            node = 2 * node if tree[2 * node] >= size else 2 * node + 1
        rows[i] = node - leaves
        tree[node] -= size
        node //= 2
        while node >= 1:
            left, right = tree[2 * node], tree[2 * node + 1]
            most = left if left > right else right
            if tree[node] == most:
                break
            tree[node] = most
            node //= 2
    return -1


# -- images ---------------------------------------------------------------------------
@_kernel(_I64(_input(_I64), _I64, _array(_I64, 1)))
def image_widths(ids: Any, header: int, widths: Any) -> int:
    """Widths of ``[C, H, W]`` images; the first slot whose C or H differ or W < 1, or -1."""
    c0, h0 = _dim(ids[0], header, 0), _dim(ids[0], header, 1)
    for i in range(ids.shape[0]):
        obj = ids[i]
        w = _dim(obj, header, 2)
        if _dim(obj, header, 0) != c0 or _dim(obj, header, 1) != h0 or w < 1:
            return i
        widths[i] = w
    return -1


@_inline
def _fill_slot(
    out: Any,
    i: int,
    obj: int,
    header: int,
    w: int,
    pad: np.float32,
    mode: int,
    key: np.uint64,
    gain_std: np.float32,
    offset_std: np.float32,
) -> None:
    """``fill_images`` for slot ``i``: the pixels of the image at ``obj``, then its pad."""
    c, h, wp = out.shape[1], out.shape[2], out.shape[3]
    if mode != PAD_ONLY:
        data = _data(obj, header)
        s0, s1, s2 = _stride(obj, header, 0), _stride(obj, header, 1), _stride(obj, header, 2)
        gain, offset = _ONE, _ZERO
        if mode == GAIN_OFFSET_AND_PAD:
            first, state = _next_normal(key)
            second, state = _next_normal(state)
            gain = _ONE + gain_std * first
            offset = offset_std * second
        for ch in range(c):
            for y in range(h):
                row = out[i, ch, y]
                address = data + ch * s0 + y * s1
                if s2 == 4:
                    source = carray(_f32_pointer(address), w)
                    if mode == GAIN_OFFSET_AND_PAD:
                        for x in range(w):
                            scaled = source[x] * gain
                            row[x] = scaled + offset
                    else:
                        row[:w] = source
                else:
                    for x in range(w):
                        value = _load_f32(address + x * s2)
                        if mode == GAIN_OFFSET_AND_PAD:
                            scaled = value * gain
                            value = scaled + offset
                        row[x] = value
    if mode != COPY_ONLY and w < wp:
        for ch in range(c):
            for y in range(h):
                out[i, ch, y, w:] = pad


@_kernel(
    types.void(
        _input(_I64),
        _I64,
        _input(_I64),
        _array(_F32, 4),
        _F32,
        _I64,
        _input(types.uint64),
        _F32,
        _F32,
    )
)
def fill_images(
    ids: Any,
    header: int,
    widths: Any,
    out: Any,
    pad: np.float32,
    mode: int,
    keys: Any,
    gain_std: np.float32,
    offset_std: np.float32,
) -> None:
    """Copy image ``i`` into ``out[i, :, :, :widths[i]]`` and/or pad the columns after it.

    ``GAIN_OFFSET_AND_PAD`` applies ``GainOffset`` on the way: lane ``i`` draws two normals
    from ``keys[i]``; every pixel is ``(x * gain) + offset`` with two float32 roundings.
    """
    for i in range(out.shape[0]):
        key = keys[i] if mode == GAIN_OFFSET_AND_PAD else _U_GOLDEN
        _fill_slot(out, i, ids[i], header, widths[i], pad, mode, key, gain_std, offset_std)


@_kernel(
    _I64(
        *[_input(_I64)] * 4,
        *[_I64] * 4,
        *[_array(_I64, 1)] * 3,
    )
)
def check_image_batch(
    images: Any,
    targets: Any,
    labels: Any,
    indices: Any,
    header: int,
    array_type: int,
    f32: int,
    i32: int,
    widths: Any,
    lengths: Any,
    totals: Any,
) -> int:
    """Check an image batch's fields without the GIL; -1, or the first slot to decline.

    ``images[i]``: a float32 ``[C, H, W]`` ndarray (``ob_type`` is ``array_type``, dtype
    object ``f32``) with the C and H of slot 0 and W >= 1; ``targets[i]``: a 1-D int32
    ndarray (dtype object ``i32``), or no targets at all (``targets`` empty); ``labels`` and
    ``indices`` fit int32 (indices >= 0). Writes ``widths``, ``lengths`` and ``totals``
    (the widest image, the number of target values) only when every slot passes.
    """
    n = images.shape[0]
    c0, h0 = -1, -1
    for i in range(n):
        obj = images[i]
        if _type(obj, header) != array_type or _descr(obj, header) != f32:
            return i
        if _ndim(obj, header) != 3:
            return i
        if i == 0:
            c0, h0 = _dim(obj, header, 0), _dim(obj, header, 1)
        if _dim(obj, header, 0) != c0 or _dim(obj, header, 1) != h0:
            return i
        if _dim(obj, header, 2) < 1:
            return i
        if labels[i] < _INT32_MIN or labels[i] >= _INT32_LIMIT:
            return i
        if indices[i] < 0 or indices[i] >= _INT32_LIMIT:
            return i
        if targets.shape[0]:
            target = targets[i]
            if _type(target, header) != array_type or _descr(target, header) != i32:
                return i
            if _ndim(target, header) != 1:
                return i
    widest, total = 0, 0
    for i in range(n):
        w = _dim(images[i], header, 2)
        widths[i] = w
        widest = max(widest, w)
        count = _dim(targets[i], header, 0) if targets.shape[0] else 0
        lengths[i] = count
        total += count
    totals[0], totals[1] = widest, total
    return -1


@_kernel(
    types.void(
        _input(_I64),
        _input(_I64),
        _I64,
        *[_input(_I64)] * 4,
        _array(_I32, 1),
        _array(_F32, 4),
        _F32,
        _I64,
        _input(types.uint64),
        types.uint64,
        types.uint64,
        _F32,
        _F32,
    )
)
def fill_image_batch(
    images: Any,
    targets: Any,
    header: int,
    widths: Any,
    lengths: Any,
    labels: Any,
    indices: Any,
    ints: Any,
    out: Any,
    pad: np.float32,
    mode: int,
    keys: Any,
    prefix: np.uint64,
    stream: np.uint64,
    gain_std: np.float32,
    offset_std: np.float32,
) -> None:
    """A whole image batch checked by ``check_image_batch``, in one call without the GIL.

    ``ints`` gets widths, target lengths, labels, indices (``n`` each), then the targets
    one after the other; ``out`` the pixels as ``fill_images`` writes them (``COPY_AND_PAD``
    or ``GAIN_OFFSET_AND_PAD``). Lane ``i``'s key is ``keys[i]`` or, when ``keys`` is
    empty, ``mix(mix(i + prefix) + stream)``: ``derive(seed, epoch, step, i, stream)``
    with ``prefix`` the seed, epoch and step part.
    """
    n = out.shape[0]
    for i in range(n):
        ints[i] = widths[i]
        ints[n + i] = lengths[i]
        ints[2 * n + i] = labels[i]
        ints[3 * n + i] = indices[i]
    at = 4 * n
    for i in range(targets.shape[0]):
        count = lengths[i]
        if count:
            obj = targets[i]
            data, step = _data(obj, header), _stride(obj, header, 0)
            for k in range(count):
                ints[at + k] = _load_i32(data + k * step)
            at += count
    for i in range(n):
        key = _U_GOLDEN
        if mode == GAIN_OFFSET_AND_PAD:
            key = keys[i] if keys.shape[0] else _mix(_mix(np.uint64(i) + prefix) + stream)
        _fill_slot(out, i, images[i], header, widths[i], pad, mode, key, gain_std, offset_std)


@_kernel(types.void(_input(_U8, 2, "A"), _F32, _F32, _array(_F32, 3)))
def gray_to_planar(pixels: Any, scale: np.float32, bias: np.float32, out: Any) -> None:
    """``out[0, y, x] = float32(pixels[y, x]) * scale - bias`` (two roundings)."""
    for y in range(out.shape[1]):
        row = out[0, y]
        for x in range(out.shape[2]):
            scaled = np.float32(pixels[y, x]) * scale
            row[x] = scaled - bias


@_kernel(types.void(_input(_U8, 2, "A"), _input(_F32), _input(_F32), _array(_F32, 3)))
def rgb_to_planar(pixels: Any, scales: Any, biases: Any, out: Any) -> None:
    """``out[c, y, x] = float32(pixels[y, 3x + c]) * scales[c] - biases[c]``."""
    for c in range(3):
        scale, bias = scales[c], biases[c]
        for y in range(out.shape[1]):
            row = out[c, y]
            for x in range(out.shape[2]):
                scaled = np.float32(pixels[y, 3 * x + c]) * scale
                row[x] = scaled - bias


# -- sequences: byte copies, so one signature serves every dtype -------------------------
@_inline
def _fill_pattern(row: Any, start: int, stop: int, pattern: Any) -> None:
    """Positions ``[start, stop)`` of ``row`` set to ``pattern``: one byte fill when its bytes
    are all equal (zero padding), else the pattern once and copies that double what is done,
    never a copy per position."""
    size = pattern.shape[0]
    begin, total = start * size, (stop - start) * size
    if total <= 0:
        return
    uniform = True
    for k in range(1, size):
        if pattern[k] != pattern[0]:
            uniform = False
            break
    if uniform:
        row[begin : begin + total] = pattern[0]
        return
    row[begin : begin + size] = pattern
    done = size
    while done < total:  # whole patterns copied from the filled start: no overlap
        chunk = min(done, total - done)
        row[begin + done : begin + done + chunk] = row[begin : begin + chunk]
        done += chunk


@_kernel(
    _I64(
        _input(_I64),
        _I64,
        _I64,
        _input(_I64),
        _array(_U8, 2),
        _input(_U8),
        _BOOL,
        _array(_BOOL, 2),
    )
)
def pad_into(
    ids: Any,
    header: int,
    itemsize: int,
    lengths: Any,
    out: Any,
    pattern: Any,
    left: bool,
    mask: Any,
) -> int:
    """Padded rows: sequence ``i`` at the right or left end of ``out[i]``, pattern elsewhere.

    ``out`` is the tokens buffer as bytes ``[B, L * row]``, ``pattern`` one padded
    position's bytes (``row`` of them). Returns the first sequence that is not
    C-contiguous, or -1 when done.
    """
    n, width = mask.shape
    row_bytes = pattern.shape[0]
    for i in range(n):
        if not _c_contiguous(ids[i], header, itemsize):
            return i
    for i in range(n):
        count = lengths[i]
        start = width - count if left else 0
        row = out[i]
        _fill_pattern(row, 0, start, pattern)
        if count:
            source = carray(_u8_pointer(_data(ids[i], header)), count * row_bytes)
            row[start * row_bytes : (start + count) * row_bytes] = source
        _fill_pattern(row, start + count, width, pattern)
        for t in range(width):
            mask[i, t] = start <= t < start + count
    return -1


@_kernel(
    _I64(
        _input(_I64),
        _I64,
        _I64,
        *[_input(_I64)] * 6,
        _array(_U8, 2),
        _input(_U8),
        _array(_I64, 2),
        _array(_I32, 2),
    )
)
def pack_into(
    ids: Any,
    header: int,
    itemsize: int,
    row_ptr: Any,
    source: Any,
    starts: Any,
    lengths: Any,
    offsets: Any,
    segment_of: Any,
    out: Any,
    pattern: Any,
    positions: Any,
    segments: Any,
) -> int:
    """Packed rows: piece ``k`` of row ``r`` is ``seq[source[k]][starts[k]:+lengths[k]]``.

    Tokens are bytes ``[rows, context * row]``; positions count 0.. in every piece (0 on
    padding); segments hold ``segment_of[k]`` (-1 on padding). Returns the first piece
    whose sequence is not C-contiguous or too short, or -1 when done.
    """
    rows, context = positions.shape
    row_bytes = pattern.shape[0]
    for k in range(source.shape[0]):
        if source[k] < 0 or source[k] >= ids.shape[0]:
            return k
        obj = ids[source[k]]
        if not _c_contiguous(obj, header, itemsize):
            return k
        if starts[k] < 0 or lengths[k] < 0 or starts[k] + lengths[k] > _dim(obj, header, 0):
            return k
        if offsets[k] < 0 or offsets[k] + lengths[k] > context:
            return k
    for r in range(rows):
        _fill_pattern(out[r], 0, context, pattern)
        positions[r, :] = 0
        segments[r, :] = -1
        for k in range(row_ptr[r], row_ptr[r + 1]):
            count, at = lengths[k], offsets[k]
            if count:
                data = _data(ids[source[k]], header) + starts[k] * row_bytes
                chunk = carray(_u8_pointer(data), count * row_bytes)
                out[r, at * row_bytes : (at + count) * row_bytes] = chunk
            segment = np.int32(segment_of[k])
            for t in range(count):
                positions[r, at + t] = t
                segments[r, at + t] = segment
    return -1


@_kernel(types.void(_input(_I32, 2), _array(_BOOL, 3)))
def causal_mask(segments: Any, mask: Any) -> None:
    """``mask[r, i, j]``: i and j in the same piece (not padding) and ``j <= i``."""
    rows, context = segments.shape
    for r in range(rows):
        for i in range(context):
            mine = segments[r, i]
            for j in range(context):
                mask[r, i, j] = j <= i and mine >= 0 and segments[r, j] == mine
