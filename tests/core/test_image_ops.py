"""GainOffset, batch_normals and the 8-bit helpers (docs/contract.md, "Pixel helpers")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from aioloader.core._image_ops import (
    GainOffset,
    batch_normals,
    gray8_to_planar,
    rgb8_to_planar,
)
from aioloader.core._rng import BatchRng, SampleRng

F32 = np.float32


def bits(array: np.ndarray[Any, Any]) -> bytes:
    return np.ascontiguousarray(array).tobytes()


def test_gain_offset_per_sample_is_x_times_gain_plus_offset_in_float32() -> None:
    scratch = (np.arange(6, dtype=F32) + F32(0.5)).reshape(1, 2, 3)
    before = scratch.copy()
    GainOffset(0.25, 0.5)(scratch, SampleRng(1234))
    rng = SampleRng(1234)
    gain = F32(1.0) + F32(0.25) * rng.next_normal()
    offset = F32(0.5) * rng.next_normal()
    expected = [F32(F32(x) * gain) + offset for x in before.ravel().tolist()]
    assert bits(scratch) == bits(np.array(expected, dtype=F32))


def test_batch_normals_match_sequential_draws() -> None:
    keys = np.array([0, 1, 2**64 - 1, 0x9E3779B97F4A7C15, 12345], dtype=np.uint64)
    fast, slow = BatchRng(keys), BatchRng(keys)
    drawn = batch_normals(fast, 3)
    expected = np.stack([slow.next_normal() for _ in range(3)])
    assert bits(drawn) == bits(expected)
    assert fast.states.tolist() == slow.states.tolist()
    scalar = SampleRng(2**64 - 1)
    assert [scalar.next_normal() for _ in range(3)] == drawn[:, 2].tolist()


def _reference_planar(rows: list[list[int]], mean: float, std: float) -> list[list[float]]:
    scale = F32(1.0) / (F32(255.0) * F32(std))
    bias = F32(mean) / F32(std)
    return [[float(F32(F32(p) * scale) - bias) for p in row] for row in rows]


def test_gray8_matches_a_float32_reference_with_a_stride() -> None:
    buffer = np.random.default_rng(3).integers(0, 256, size=(5, 11), dtype=np.uint8)
    view = buffer[:, 2:9]  # a view into a wider buffer: stride 11, 7 columns
    out = gray8_to_planar(view, width=6, mean=0.485, std=0.229)
    expected = _reference_planar(view[:, :6].tolist(), 0.485, 0.229)
    assert (out.dtype, out.shape) == (F32, (1, 5, 6))
    assert out[0].tolist() == expected
    assert gray8_to_planar(view).shape == (1, 5, 7)
    assert gray8_to_planar(np.array([[0, 51, 255]], np.uint8)).tolist() == [
        [[0.0, float(F32(51) * (F32(1) / F32(255))), 1.0]]
    ]


def test_rgb8_matches_a_float32_reference_per_channel() -> None:
    buffer = np.random.default_rng(4).integers(0, 256, size=(3, 20), dtype=np.uint8)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    out = rgb8_to_planar(buffer, width=5, mean=mean, std=std)
    assert (out.dtype, out.shape) == (F32, (3, 3, 5))
    for c in range(3):
        channel = [row[c:15:3] for row in buffer.tolist()]
        assert out[c].tolist() == _reference_planar(channel, mean[c], std[c])
    assert rgb8_to_planar(buffer).shape == (3, 3, 6)  # 20 // 3
    assert rgb8_to_planar(buffer[:, 1:]).shape == (3, 3, 6)  # odd offset, stride kept


def test_helper_errors_are_named() -> None:
    pixels = np.zeros((2, 6), np.uint8)
    with pytest.raises(
        ValueError, match=r"width must satisfy 1 \* width <= stride \(6\) but got 7"
    ):
        gray8_to_planar(pixels, width=7)
    with pytest.raises(
        ValueError, match=r"width must satisfy 3 \* width <= stride \(6\) but got 3"
    ):
        rgb8_to_planar(pixels, width=3)
    with pytest.raises(ValueError, match=r"width must be an integer in \[1, 2\^63\) but got 0"):
        gray8_to_planar(pixels, width=0)
    with pytest.raises(TypeError, match=r"pixels must be a 2-D uint8 array \[H, stride\]"):
        gray8_to_planar(np.zeros((2, 6), np.int16))
    with pytest.raises(ValueError, match="std must be non-zero but got 0"):
        gray8_to_planar(pixels, std=0)
    with pytest.raises(ValueError, match=r"std\[1\] must be non-zero but got 0.0"):
        rgb8_to_planar(pixels, std=(1.0, 0.0, 1.0))
    with pytest.raises(ValueError, match=r"mean must hold 3 values \(R, G, B\) but got 2"):
        rgb8_to_planar(pixels, mean=(0.0, 0.0))
    with pytest.raises(ValueError, match="mean must be finite but got nan"):
        gray8_to_planar(pixels, mean=float("nan"))
    with pytest.raises(TypeError, match=r"^std must be a real number but got bool \(True\)$"):
        gray8_to_planar(pixels, std=True)
    with pytest.raises(TypeError, match=r"^mean\[2\] must be a real number but got str \('0'\)$"):
        rgb8_to_planar(pixels, mean=(0.0, 0.0, "0"))  # type: ignore[arg-type]
