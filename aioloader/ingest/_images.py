"""Resize and re-encode images, run in worker threads.

Pillow decodes and resizes with the GIL released, but its encoders hold it. JPEG is
therefore encoded with simplejpeg (libjpeg-turbo, GIL released; in the ``ingest`` extra)
where it is installed, so the threads use every core; Pillow encodes otherwise. The
encoder is one of the settings a manifest records: a resume never mixes the two.

Resize modes (as img2dataset names them):

- ``"border"``: the longer side becomes ``size``; the image is centred on a black
  ``size x size`` square.
- ``"keep_ratio"``: the shorter side becomes ``size``; the aspect ratio is kept.
- ``"center_crop"``: the shorter side becomes ``size``, then the centre ``size x size``.
- ``"no"``: no resizing (re-encoding only, when a format is asked for).

Downscaling averages pixels (box filter, like OpenCV's ``INTER_AREA``); upscaling uses
Lanczos. A JPEG to be shrunk is decoded at a reduced scale first (the decoder's DCT
scaling, never below the target size), which cuts decoding time several-fold.
"""

from __future__ import annotations

import functools
import io
from dataclasses import dataclass
from typing import Any, Literal

from ..core import at_least_or_none, positive_up_to

__all__ = ("ImageOptions", "ProcessedImage", "jpeg_encoder", "process_image")

ResizeMode = Literal["border", "keep_ratio", "center_crop", "no"]
RESIZE_MODES: tuple[str, ...] = ("border", "keep_ratio", "center_crop", "no")
FORMATS = {"jpeg": ("JPEG", "jpg"), "png": ("PNG", "png"), "webp": ("WEBP", "webp")}


@dataclass(frozen=True)
class ImageOptions:
    """What to do with each image.

    Args:
        size: Target size in pixels (see the resize modes); None keeps the size.
        resize_mode: ``"border"``, ``"keep_ratio"``, ``"center_crop"`` or ``"no"``.
        format: ``"jpeg"``, ``"png"`` or ``"webp"`` to re-encode; None keeps the bytes
            as fetched when no resize happens (and encodes JPEG when one does).
        quality: Encoder quality (JPEG and WebP).
        only_if_bigger: Resize only images larger than ``size``.
        reduced_decode: Decode a JPEG that will be shrunk at 1/2, 1/4 or 1/8 scale (never
            below the target size) before resizing; False decodes at full size first.
    """

    size: int | None = None
    resize_mode: ResizeMode = "border"
    format: str | None = None
    quality: int = 95
    only_if_bigger: bool = False
    reduced_decode: bool = True

    def __post_init__(self) -> None:
        at_least_or_none("size", self.size, 1)
        if self.resize_mode not in RESIZE_MODES:
            raise ValueError(
                f"resize_mode must be one of {', '.join(RESIZE_MODES)} but got {self.resize_mode!r}"
            )
        if self.format is not None and self.format not in FORMATS:
            raise ValueError(
                f"format must be one of {', '.join(FORMATS)} or None but got {self.format!r}"
            )
        positive_up_to("quality", self.quality, 100)

    @property
    def touches_pixels(self) -> bool:
        """Whether images are decoded at all (a resize or a re-encode is asked for)."""
        resizes = self.size is not None and self.resize_mode != "no"
        return resizes or self.format is not None


@dataclass(frozen=True)
class ProcessedImage:
    """An encoded image, its field name (extension) and its sizes before and after."""

    data: bytes
    extension: str
    width: int
    height: int
    original_width: int
    original_height: int


def _target(width: int, height: int, options: ImageOptions) -> tuple[int, int] | None:
    size = options.size
    if size is None or options.resize_mode == "no":
        return None
    if options.resize_mode == "border":
        scale = size / max(width, height)
    else:
        scale = size / min(width, height)
    if options.only_if_bigger and scale >= 1:
        return None
    return max(1, round(width * scale)), max(1, round(height * scale))


def process_image(data: bytes, options: ImageOptions) -> ProcessedImage:
    """Decode, resize and encode one image; raises ``ValueError`` when it does not decode."""
    from PIL import Image, UnidentifiedImageError

    try:
        image: Any = Image.open(io.BytesIO(data))
        original = image.size
        target = _target(original[0], original[1], options)
        shrinking = target is not None and target[0] < original[0]
        if shrinking and options.reduced_decode and image.format == "JPEG":
            image.draft("RGB", target)  # 1/2, 1/4 or 1/8 scale, never below target
        image = image.convert("RGB")
    except UnidentifiedImageError:
        raise ValueError("the body is not an image Pillow can identify") from None
    except (OSError, Image.DecompressionBombError, SyntaxError, ValueError) as exc:
        raise ValueError(f"the image does not decode: {exc}") from None
    if target is not None:
        shrinking = target[0] < image.size[0]
        resample = Image.Resampling.BOX if shrinking else Image.Resampling.LANCZOS
        image = image.resize(target, resample)
        size = options.size or 0
        if options.resize_mode == "center_crop":
            left, top = (target[0] - size) // 2, (target[1] - size) // 2
            image = image.crop((left, top, left + size, top + size))
        elif options.resize_mode == "border":
            square = Image.new("RGB", (size, size))
            square.paste(image, ((size - target[0]) // 2, (size - target[1]) // 2))
            image = square
    pil_format, extension = FORMATS[options.format or "jpeg"]
    if pil_format == "JPEG" and jpeg_encoder() == "simplejpeg":
        encoded = _simplejpeg(image, options.quality)
    else:
        out = io.BytesIO()
        save: dict[str, Any] = {"quality": options.quality} if pil_format != "PNG" else {}
        image.save(out, pil_format, **save)
        encoded = out.getvalue()
    return ProcessedImage(encoded, extension, *image.size, *original)


@functools.cache
def jpeg_encoder() -> str:
    """``"simplejpeg"`` where it is installed (GIL released), else ``"pillow"``."""
    try:
        import simplejpeg  # noqa: F401
    except ImportError:
        return "pillow"
    return "simplejpeg"


def _simplejpeg(image: Any, quality: int) -> bytes:
    """``image`` (RGB) as a baseline JPEG with 4:2:0 chroma, as Pillow writes by default."""
    import numpy as np
    import simplejpeg

    pixels = np.asarray(image)
    encoded: bytes = simplejpeg.encode_jpeg(
        pixels, quality=quality, colorspace="RGB", colorsubsampling="420"
    )
    return encoded
