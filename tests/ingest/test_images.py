"""Resize modes and re-encoding of ingested images."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from aioloader.ingest import ImageOptions, process_image


def _jpeg(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 60)).save(out, "JPEG")
    return out.getvalue()


@pytest.mark.parametrize(
    ("mode", "size", "expected"),
    [
        ("border", 64, (64, 64)),
        ("keep_ratio", 64, (128, 64)),
        ("center_crop", 64, (64, 64)),
        ("no", 64, (400, 200)),
    ],
)
def test_resize_modes_give_the_documented_sizes(
    mode: str, size: int, expected: tuple[int, int]
) -> None:
    image = process_image(_jpeg(400, 200), ImageOptions(size=size, resize_mode=mode))  # type: ignore[arg-type]
    assert (image.width, image.height) == expected
    assert (image.original_width, image.original_height, image.extension) == (400, 200, "jpg")
    assert Image.open(io.BytesIO(image.data)).size == expected


def test_border_pads_with_black_and_keeps_the_content_centred() -> None:
    image = process_image(_jpeg(400, 200), ImageOptions(size=64, format="png"))
    decoded = Image.open(io.BytesIO(image.data)).convert("RGB")
    assert image.extension == "png"
    assert decoded.getpixel((32, 2)) == (0, 0, 0)  # the border above the picture
    red, green, blue = decoded.getpixel((32, 32))  # type: ignore[misc]
    assert (abs(red - 200) <= 8, abs(green - 30) <= 8, abs(blue - 60) <= 8) == (True, True, True)


def test_only_if_bigger_leaves_small_images_their_size() -> None:
    options = ImageOptions(size=64, resize_mode="keep_ratio", only_if_bigger=True)
    assert (
        process_image(_jpeg(40, 30), options).width,
        process_image(_jpeg(40, 30), options).height,
    ) == (40, 30)
    assert process_image(_jpeg(400, 300), options).height == 64


def test_what_does_not_decode_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not an image Pillow can identify"):
        process_image(b"\xff\xd8not a jpeg", ImageOptions(size=8))


def test_bad_options_name_the_rule() -> None:
    with pytest.raises(ValueError, match=r"^size must be an integer >= 1 or None but got 0$"):
        ImageOptions(size=0)
    with pytest.raises(
        TypeError, match=r"^size must be an integer >= 1 or None but got float \(8\.0\)$"
    ):
        ImageOptions(size=8.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="resize_mode must be one of border, keep_ratio"):
        ImageOptions(resize_mode="stretch")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="format must be one of jpeg, png, webp or None"):
        ImageOptions(format="gif")
    with pytest.raises(ValueError, match=r"^quality must be an integer in \[1, 100\] but got 101$"):
        ImageOptions(quality=101)
    with pytest.raises(TypeError, match=r"^quality must be an integer but got a bool \(True\)$"):
        ImageOptions(quality=True)


def test_reduced_and_full_decoding_give_the_same_size_and_close_pixels() -> None:
    reduced = process_image(_jpeg(800, 600), ImageOptions(size=100))
    full = process_image(_jpeg(800, 600), ImageOptions(size=100, reduced_decode=False))
    assert (reduced.width, reduced.height) == (full.width, full.height) == (100, 100)
    a = Image.open(io.BytesIO(reduced.data)).convert("RGB").getpixel((50, 50))
    b = Image.open(io.BytesIO(full.data)).convert("RGB").getpixel((50, 50))
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= 6  # type: ignore[arg-type]


def _gradient_jpeg() -> bytes:
    import numpy as np

    x = np.linspace(0, 255, 320, dtype=np.float32)
    pixels = np.stack(np.broadcast_arrays(x[None, :], x[:, None], 255 - x[None, :]), axis=-1)
    out = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(out, "JPEG", quality=95)
    return out.getvalue()


def test_jpeg_is_encoded_by_simplejpeg_with_pillows_pixels_and_layout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import numpy as np

    from aioloader.ingest import _images

    assert _images.jpeg_encoder() == "simplejpeg"  # in the ingest extra
    options = ImageOptions(size=128, resize_mode="center_crop")
    ours = process_image(_gradient_jpeg(), options)
    _images.jpeg_encoder.cache_clear()
    monkeypatch.setitem(__import__("sys").modules, "simplejpeg", None)  # as if not installed
    try:
        assert _images.jpeg_encoder() == "pillow"
        pillows = process_image(_gradient_jpeg(), options)
    finally:
        _images.jpeg_encoder.cache_clear()
    assert ours.data != pillows.data
    a, b = (Image.open(io.BytesIO(p.data)) for p in (ours, pillows))
    assert (a.format, a.mode, a.size) == (b.format, b.mode, b.size) == ("JPEG", "RGB", (128, 128))
    # the same 4:2:0 chroma subsampling: Y sampled at 2x2, Cb and Cr at 1x1
    assert getattr(a, "layer") == getattr(b, "layer") == [(1, 2, 2, 0), (2, 1, 1, 1), (3, 1, 1, 1)]  # noqa: B009
    diff = np.abs(np.asarray(a, np.int16) - np.asarray(b, np.int16))
    assert diff.mean() < 1.0
    assert diff.max() <= 4
