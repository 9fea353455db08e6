"""A JPEG chain that releases the GIL: decode (libjpeg-turbo), crop, bilinear resize, flip.

``JpegCropResize`` decodes with simplejpeg (the GIL is released while libjpeg-turbo works)
and crops, resizes and flips in one compiled ``nogil`` kernel; ``crop_resize_reference``
is the numpy reference, and the two give the same bits. Only the argument checks, the
rng draws and the calls themselves run Python, a few microseconds per sample.

The resize (``crop_resize``, both implementations), per axis: a box of ``length`` pixels
starting at ``start`` in a ``full``-pixel image that was decoded to ``n`` pixels is sampled
at ``m`` outputs with half-pixel centres. Output ``i`` reads the source coordinate
``u_i = (start + (i + 1/2) * length / m) * n / full - 1/2``, held in ``Q = 11`` fractional
bits and rounded down:

    U_i = floor((2*start*m + (2*i + 1)*length) * n * 2^Q / (2*m*full)) - 2^(Q-1)

clamped to ``[0, (n - 1) * 2^Q]``; ``j = U_i >> Q`` and ``f = U_i & (2^Q - 1)``. Taps
``j`` and ``j1 = min(j + 1, n - 1)`` are clamped to the image, not to the box. With
``(y, g)`` for a row and ``(x, f)`` for a column, every channel is

    t(y) = p[y, x] * (2^Q - f) + p[y, x1] * f                (exact integers)
    out  = (t(y) * (2^Q - g) + t(y1) * g + 2^(2Q-1)) >> 2Q    (round half up)

with no rounding in between. ``flip`` mirrors the output columns. This is plain bilinear
sampling, as Pillow's ``Image.transform(..., AFFINE, ..., BILINEAR)`` computes it in
floating point (within 1 of it); Pillow's ``resize`` widens its filter when it shrinks, so
it differs from both when the box is larger than the output.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ._check import flag, positive_up_to
from ._compiled import compiled_image_chain
from ._digest import digest_batch
from ._markers import takes_rng
from ._rng import SampleRng

Q = 11
"""Fractional bits of a source coordinate (the same in ``_image_chain_kernels``)."""
MAX_OUTPUT = 1 << 14
"""Largest output height or width: keeps every intermediate within int64."""
MAX_SIDE = 65535
"""Largest image side (JPEG's own limit)."""
DCT_SCALES = (1, 2, 4, 8)
CHAIN_VERSION = 1
"""Part of every digest: bumped if the chain's pixels or draws ever change."""

U8Array = npt.NDArray[np.uint8]
Box = tuple[int, int, int, int]
Size = tuple[int, int]

_ONE = 1 << Q
_HALF = 1 << (Q - 1)
_ROUND = 1 << (2 * Q - 1)


def _axis(start: int, length: int, full: int, n: int, m: int) -> tuple[Any, Any]:
    """Source index and weight (``Q`` bits) of each of ``m`` outputs along one axis."""
    i = np.arange(m, dtype=np.int64)
    u = (2 * start * m + (2 * i + 1) * length) * n * _ONE // (2 * m * full) - _HALF
    np.clip(u, 0, (n - 1) * _ONE, out=u)
    return u >> Q, u & (_ONE - 1)


def crop_resize_reference(
    image: U8Array, box: Box, full: tuple[int, int], size: tuple[int, int], flip: bool
) -> U8Array:
    """The numpy reference of the crop, resize and flip (formula in the module docstring)."""
    top, left, height, width = box
    n_rows, n_cols = image.shape[0], image.shape[1]
    rows, g = _axis(top, height, full[0], n_rows, size[0])
    cols, f = _axis(left, width, full[1], n_cols, size[1])
    if flip:
        cols, f = cols[::-1], f[::-1]
    rows1 = np.minimum(rows + 1, n_rows - 1)
    cols1 = np.minimum(cols + 1, n_cols - 1)
    pixels = image.astype(np.int64)
    f, f0 = f[None, :, None], _ONE - f[None, :, None]
    top_rows, bottom_rows = pixels[rows], pixels[rows1]
    t0 = top_rows[:, cols] * f0 + top_rows[:, cols1] * f
    t1 = bottom_rows[:, cols] * f0 + bottom_rows[:, cols1] * f
    g = g[:, None, None]
    out: U8Array = ((t0 * (_ONE - g) + t1 * g + _ROUND) >> (2 * Q)).astype(np.uint8)
    return out


def _kernel() -> Callable[..., None] | None:
    """The compiled kernel when it is to run now, else ``None`` (the reference runs).

    It is one of the batch kernels (``aioloader.kernels``): it compiles in the child that
    fills numba's cache, loads with them, never on a thread that runs an event loop, and
    follows ``AIOLOADER_KERNELS`` and ``load_kernels()``.
    """
    kernels = compiled_image_chain()
    if kernels is None:
        return None
    kernel: Callable[..., None] = kernels.crop_resize_flip
    return kernel


def _crop_resize_into(
    image: U8Array, box: Box, full: tuple[int, int], flip: bool, out: U8Array
) -> None:
    kernel = _kernel()
    if kernel is None:
        out[...] = crop_resize_reference(image, box, full, out.shape[:2], flip)
    else:
        kernel(image, *box, *full, flip, out)


def _size(name: str, value: Any, limit: int) -> Size:
    if isinstance(value, (tuple, list)) and len(value) == 2:
        first = positive_up_to(f"{name}[0]", value[0], limit)
        return first, positive_up_to(f"{name}[1]", value[1], limit)
    if isinstance(value, (tuple, list)):
        raise TypeError(f"{name} must be an int or (height, width) but got {value!r}")
    side = positive_up_to(name, value, limit)
    return side, side


def crop_resize(
    image: U8Array, size: int | tuple[int, int], box: Box | None = None, *, flip: bool = False
) -> U8Array:
    """Crop ``box = (top, left, height, width)`` of a uint8 ``[H, W, C]`` image, resize it
    bilinearly to ``size`` and mirror it left-right if ``flip``: a new ``[h, w, C]`` array.

    GIL-free when the compiled kernels run; bit-identical to ``crop_resize_reference``.

    >>> image = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    >>> crop_resize(image, (2, 2), flip=True)[0, 0].tolist()
    [3, 4, 5]
    """
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3:
        raise TypeError(
            "image must be a uint8 array [H, W, C] but got "
            f"{getattr(image, 'dtype', type(image).__name__)} "
            f"with shape {getattr(image, 'shape', None)}"
        )
    if min(image.shape) < 1 or max(image.shape[:2]) > MAX_SIDE:
        raise ValueError(
            f"image must have H, W in [1, {MAX_SIDE}] and C >= 1 but got shape {image.shape}"
        )
    height, width = _size("size", size, MAX_OUTPUT)
    full = image.shape[0], image.shape[1]
    box = (0, 0, *full) if box is None else _check_box(box, full)
    out = np.empty((height, width, image.shape[2]), np.uint8)
    _crop_resize_into(np.ascontiguousarray(image), box, full, flag("flip", flip), out)
    return out


def _check_box(box: Any, full: tuple[int, int]) -> Box:
    if not isinstance(box, tuple) or len(box) != 4:
        raise TypeError(f"box must be a tuple (top, left, height, width) but got {box!r}")
    top, left, height, width = (int(v) if isinstance(v, (int, np.integer)) else -1 for v in box)
    if (
        min(top, left) < 0
        or min(height, width) < 1
        or top + height > full[0]
        or left + width > full[1]
        or any(isinstance(v, bool) for v in box)
    ):
        raise ValueError(
            f"box must be integers (top, left, height, width) inside the {full[0]}x{full[1]} "
            f"image with height, width >= 1 but got {box!r}"
        )
    return top, left, height, width


def _simplejpeg() -> Any:
    try:
        return importlib.import_module("simplejpeg")
    except ImportError:
        raise ImportError(
            "JpegCropResize needs simplejpeg (libjpeg-turbo): pip install 'aioloader[images]'"
        ) from None


_DATA_TYPES = (bytes, bytearray, memoryview, np.ndarray)
_SCRATCH_LIMIT = 1 << 26
_local = threading.local()


def _scratch(nbytes: int) -> U8Array | None:
    """This thread's decode buffer of at least ``nbytes`` (``None`` past 64 MiB)."""
    buffer: U8Array | None = getattr(_local, "buffer", None)
    if buffer is not None and buffer.nbytes >= nbytes:
        return buffer
    if nbytes > _SCRATCH_LIMIT:
        return None
    _local.buffer = buffer = np.empty(nbytes, np.uint8)
    return buffer


@takes_rng
@dataclass(frozen=True, slots=True)
class JpegCropResize:
    """Decode a JPEG, crop a random square, resize it bilinearly and maybe flip it.

    ``chain(data, rng)`` returns a new uint8 ``[height, width, 3]`` RGB array. The GIL is
    held only for the checks, the draws and the calls (a few microseconds per sample), so
    build threads scale. The draws, from ``rng`` in this order: the side
    ``low + rng.next_int(high - low + 1)`` (then at most the image's shorter side), the top
    ``rng.next_int(H - side + 1)``, the left ``rng.next_int(W - side + 1)``, and with
    ``flip`` one ``rng.next_u64()`` whose top bit mirrors the image. So the loader's
    ``transform(sample, rng)`` keeps every batch a pure function of ``(seed, step)``.

    Args:
        size: Output ``(height, width)``, or one int for a square.
        crop: Side of the square box, drawn in ``[low, high]`` (a pair) or fixed (an int),
            in the file's pixels; ``None`` resizes the whole image (no draws).
        flip: Mirror left-right with probability 1/2.
        dct_scale: Decode at ``1/dct_scale`` of the file's size (1, 2, 4 or 8): faster,
            and different pixels. The box is drawn in the file's pixels and scaled.
        fast_dct: libjpeg-turbo's fast integer DCT (different pixels).
        fast_upsample: libjpeg-turbo's fast chroma upsampling (different pixels).

    ``digest`` names the chain's pixels: options that change them change it.

    >>> chain = JpegCropResize(size=224, crop=(300, 360), flip=True)
    >>> chain.digest == JpegCropResize(224, (300, 360), True, dct_scale=2).digest
    False
    """

    size: int | tuple[int, int] = 224
    crop: int | tuple[int, int] | None = None
    flip: bool = False
    dct_scale: int = 1
    fast_dct: bool = False
    fast_upsample: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _size("size", self.size, MAX_OUTPUT))
        crop = self.crop
        if crop is not None:
            low, high = _size("crop", crop, MAX_SIDE)
            if low > high:
                raise ValueError(f"crop must be (low, high) with low <= high but got {crop!r}")
            object.__setattr__(self, "crop", (low, high))
        for name in ("flip", "fast_dct", "fast_upsample"):
            flag(name, getattr(self, name))
        if isinstance(self.dct_scale, bool) or self.dct_scale not in DCT_SCALES:
            raise ValueError(f"dct_scale must be 1, 2, 4 or 8 but got {self.dct_scale!r}")

    def fingerprint_fields(self) -> dict[str, Any]:
        """JSON data of what decides the pixels and draws, the chain's version included."""
        crop = None if self.crop is None else list(self.crop)  # type: ignore[arg-type]
        return {
            "version": CHAIN_VERSION,
            "fraction_bits": Q,
            "size": list(self.size),  # type: ignore[arg-type]  # a pair by now
            "crop": crop,
            "flip": self.flip,
            "dct_scale": self.dct_scale,
            "fast_dct": self.fast_dct,
            "fast_upsample": self.fast_upsample,
        }

    def __digest_fields__(self) -> list[tuple[str, Any]]:
        return sorted(self.fingerprint_fields().items())

    @property
    def digest(self) -> str:
        """Hex SHA-256 of ``fingerprint_fields()``: options that change the pixels change it."""
        return digest_batch(self)

    def __call__(self, data: bytes | bytearray | memoryview | U8Array, rng: Any = None) -> U8Array:
        """The chain's uint8 ``[height, width, 3]`` output for one JPEG."""
        if not isinstance(data, _DATA_TYPES):
            raise TypeError(
                f"data must be the JPEG's bytes (bytes, bytearray, memoryview or a uint8 "
                f"array) but got {type(data).__name__}"
            )
        if (self.crop is not None or self.flip) and not isinstance(rng, SampleRng):
            raise TypeError(
                "rng must be a SampleRng when crop or flip is set (the loader passes one as "
                f"transform(sample, rng)) but got {type(rng).__name__}"
            )
        image, full = self._decode(data, reuse=True)
        top, left, side_h, side_w, flipped = self.draw(full, rng)
        out = np.empty((*self.size, 3), np.uint8)  # type: ignore[misc]  # a tuple by now
        _crop_resize_into(image, (top, left, side_h, side_w), full, flipped, out)
        return out

    def decode(self, data: bytes | bytearray | memoryview | U8Array) -> tuple[U8Array, Size]:
        """``(pixels, (H, W))``: new RGB pixels at ``dct_scale`` and the file's own size."""
        return self._decode(data, reuse=False)

    def _decode(self, data: Any, *, reuse: bool) -> tuple[U8Array, Size]:
        """With ``reuse`` the pixels land in this thread's scratch buffer (no allocation,
        no page faults, no free with the GIL held); they live until its next decode."""
        simplejpeg = _simplejpeg()
        scale, options = self.dct_scale, (self.fast_dct, self.fast_upsample)
        try:
            height, width = simplejpeg.decode_jpeg_header(data)[:2]
            minimum = (0, 0) if scale == 1 else (-(-height // scale), -(-width // scale))
            buffer = None
            if reuse:
                rows, cols = (height, width)
                if scale != 1:
                    rows, cols = simplejpeg.decode_jpeg_header(data, *minimum)[:2]
                buffer = _scratch(rows * cols * 3)
            image = simplejpeg.decode_jpeg(data, "RGB", *options, *minimum, 1.0, buffer)
        except ValueError as error:
            raise ValueError(
                f"data must be a JPEG that libjpeg-turbo decodes but got {len(data)} bytes "
                f"it rejects: {error}"
            ) from None
        return image, (height, width)

    def draw(self, full: Size, rng: SampleRng | None) -> tuple[int, int, int, int, bool]:
        """``(top, left, height, width, flip)`` for a ``full = (H, W)`` image (see above)."""
        height, width = full
        top, left = 0, 0
        if self.crop is not None and rng is not None:
            low, high = self.crop  # type: ignore[misc]  # a pair by now
            side = min(low + rng.next_int(high - low + 1), height, width)
            top = rng.next_int(height - side + 1)
            left = rng.next_int(width - side + 1)
            height = width = side
        flipped = self.flip and rng is not None and rng.next_u64() >> 63 == 1
        return top, left, height, width, flipped


__all__ = ("JpegCropResize", "crop_resize", "crop_resize_reference")
