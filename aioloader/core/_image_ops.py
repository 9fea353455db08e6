"""Image operations: elementwise augmentations (per sample and batched) and 8-bit helpers.

``GainOffset`` is usable per sample, ``augment(scratch, rng)``, and over a whole padded
batch, ``augment_batch(images, widths, rng)``, with bit-identical results: the same draws
(``batch_normals`` computes every lane's at once) and the same float32 operation order.
``gray8_to_planar`` and ``rgb8_to_planar`` follow docs/contract.md, "Pixel helpers", exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np
import numpy.typing as npt

from ._check import finite_non_negative, positive_int, real
from ._compiled import compiled
from ._rng import GOLDEN, MASK64, BatchRng, SampleRng, mix_array

F32 = np.dtype(np.float32)
F32Array = npt.NDArray[np.float32]
I32Array = npt.NDArray[np.int32]
_ONE = np.float32(1.0)
_SINGLE_SCALE = np.float32(2.0**-24)


@runtime_checkable
class BatchAugmentation(Protocol):
    """An augmentation usable per sample that can also do a whole batch in one pass.

    ``augment_batch(images, widths, rng)`` must leave ``images[i, :, :, :widths[i]]``
    bit-identical to what ``self(scratch_i, SampleRng(key_i))`` leaves in a scratch copy of
    sample ``i``, where lane ``i`` of ``rng`` starts at ``key_i``. It may write anything in
    the pad columns: the collator rewrites them with ``pad_value`` afterwards.
    """

    def __call__(self, scratch: F32Array, rng: SampleRng) -> None: ...

    def augment_batch(self, images: F32Array, widths: I32Array, rng: BatchRng) -> None: ...


@dataclass(frozen=True, slots=True)
class GainOffset:
    """``x * gain + offset`` per image, in float32 (two roundings, no FMA).

    ``gain = 1 + float32(gain_std) * n1`` and ``offset = float32(offset_std) * n2`` where
    ``n1``, ``n2`` are the first two ``next_normal()`` draws of the sample's rng.

    >>> scratch = np.ones((1, 1, 2), np.float32)
    >>> GainOffset(0.0, 0.0)(scratch, SampleRng(0)); scratch.tolist()
    [[[1.0, 1.0]]]
    """

    gain_std: float = 0.1
    offset_std: float = 0.1
    chunk: int = 16

    def __post_init__(self) -> None:
        finite_non_negative("gain_std", self.gain_std)
        finite_non_negative("offset_std", self.offset_std)
        positive_int("chunk", self.chunk)

    def __call__(self, scratch: F32Array, rng: SampleRng) -> None:
        """Per-sample form: edit ``scratch`` in place."""
        gain = _ONE + np.float32(self.gain_std) * rng.next_normal()
        offset = np.float32(self.offset_std) * rng.next_normal()
        np.multiply(scratch, gain, out=scratch)
        np.add(scratch, offset, out=scratch)

    def augment_batch(self, images: F32Array, widths: I32Array, rng: BatchRng) -> None:
        """Batch form: one draw per lane, then whole chunks of images (pad columns too)."""
        normals = batch_normals(rng, 2)
        gain = _ONE + np.float32(self.gain_std) * normals[0]
        offset = np.float32(self.offset_std) * normals[1]
        lanes = (slice(None),) + (None,) * (images.ndim - 1)
        gain, offset = gain[lanes], offset[lanes]
        for start in range(0, images.shape[0], self.chunk):
            part = images[start : start + self.chunk]
            np.multiply(part, gain[start : start + self.chunk], out=part)
            np.add(part, offset[start : start + self.chunk], out=part)


def batch_normals(rng: BatchRng, count: int) -> F32Array:
    """``count`` successive ``next_normal()`` draws of every lane, as ``[count, lanes]``.

    Bit-identical to calling ``rng.next_normal()`` ``count`` times (and advances ``rng`` the
    same way), but computes all ``12 * count`` uniforms in one array pass; the float32 sums
    run left to right (``np.add.accumulate`` is sequential).
    """
    draws = 12 * count
    steps = np.arange(draws, dtype=np.uint64) * np.uint64(GOLDEN)
    outputs = mix_array(rng.states[None, :] + steps[:, None])
    singles = (outputs >> np.uint64(40)).astype(F32) * _SINGLE_SCALE
    sums = np.add.accumulate(singles.reshape(count, 12, -1), axis=1, dtype=F32)[:, -1]
    rng.states += np.uint64((draws * GOLDEN) & MASK64)
    return cast(F32Array, np.subtract(sums, np.float32(6.0), dtype=F32))


def _planar_constants(name: str, mean: float, std: float) -> tuple[np.float32, np.float32]:
    for label, value in (("mean", mean), ("std", std)):
        if not np.isfinite(real(f"{label}{name}", value)):
            raise ValueError(f"{label}{name} must be finite but got {value!r}")
    if std == 0:
        raise ValueError(f"std{name} must be non-zero but got {std!r}")
    scale = np.float32(1.0) / (np.float32(255.0) * np.float32(std))
    bias = np.float32(mean) / np.float32(std)
    return scale, bias


def _check_pixels(
    pixels: Any, width: int | None, channels: int
) -> tuple[npt.NDArray[np.uint8], int]:
    if not isinstance(pixels, np.ndarray) or pixels.dtype != np.uint8 or pixels.ndim != 2:
        shape = getattr(pixels, "shape", None)
        dtype = getattr(pixels, "dtype", type(pixels).__name__)
        raise TypeError(
            f"pixels must be a 2-D uint8 array [H, stride] but got {dtype} with shape {shape}"
        )
    stride = pixels.shape[1]
    if width is None:
        width = stride // channels
    width = positive_int("width", width)
    if channels * width > stride:
        raise ValueError(
            f"width must satisfy {channels} * width <= stride ({stride}) but got {width}"
        )
    return pixels, width


def gray8_to_planar(
    pixels: npt.NDArray[np.uint8], width: int | None = None, mean: float = 0.0, std: float = 1.0
) -> F32Array:
    """8-bit gray rows ``[H, stride]`` to float32 ``[1, H, width]``: ``p * scale - bias``.

    ``scale = 1 / (255 * std)`` and ``bias = mean / std``, each rounded to float32; the first
    ``width`` bytes of each row are used (``width`` defaults to the stride).

    >>> gray8_to_planar(np.array([[0, 255, 7]], np.uint8), width=2).tolist()
    [[[0.0, 1.0]]]
    """
    pixels, width = _check_pixels(pixels, width, 1)
    scale, bias = _planar_constants("", mean, std)
    out = np.empty((1, pixels.shape[0], width), F32)
    kernels = compiled()
    if kernels is not None:
        kernels.gray_to_planar(pixels, scale, bias, out)
        return out
    np.multiply(pixels[:, :width], scale, out=out[0], dtype=F32)
    np.subtract(out, bias, out=out)
    return out


def rgb8_to_planar(
    pixels: npt.NDArray[np.uint8],
    width: int | None = None,
    mean: Sequence[float] = (0.0, 0.0, 0.0),
    std: Sequence[float] = (1.0, 1.0, 1.0),
) -> F32Array:
    """Interleaved 8-bit RGB rows ``[H, stride]`` to float32 planar ``[3, H, width]``.

    Channel ``c`` is ``p * (1 / (255 * std[c])) - mean[c] / std[c]`` in float32; the first
    ``3 * width`` bytes of each row are used (``width`` defaults to ``stride // 3``).

    >>> rgb8_to_planar(np.array([[255, 0, 51]], np.uint8))[:, 0, 0].tolist()
    [1.0, 0.0, 0.20000001788139343]
    """
    pixels, width = _check_pixels(pixels, width, 3)
    for label, values in (("mean", mean), ("std", std)):
        if len(values) != 3:
            raise ValueError(f"{label} must hold 3 values (R, G, B) but got {len(values)}")
    height = pixels.shape[0]
    constants = [_planar_constants(f"[{c}]", mean[c], std[c]) for c in range(3)]
    out = np.empty((3, height, width), F32)
    kernels = compiled()
    if kernels is not None:
        scales = np.array([scale for scale, _ in constants], F32)
        biases = np.array([bias for _, bias in constants], F32)
        kernels.rgb_to_planar(pixels, scales, biases, out)
        return out
    interleaved = pixels[:, : 3 * width].reshape(height, width, 3)
    for c, (scale, bias) in enumerate(constants):
        np.multiply(interleaved[:, :, c], scale, out=out[c], dtype=F32)
        np.subtract(out[c], bias, out=out[c])
    return out


__all__ = ("BatchAugmentation", "GainOffset", "batch_normals", "gray8_to_planar", "rgb8_to_planar")
