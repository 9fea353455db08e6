"""Images on a local disk, one class per sub-folder, decoded with Pillow in worker threads.

Why threads of the source's own, and not a sync dataset read by the engine: the engine
reads a sync dataset's whole batch in one thread, one image after another, while this
source decodes the images of a batch concurrently in up to ``threads`` threads (Pillow
releases the GIL while it decodes and resizes), and it stays a plain async source that
knows nothing of the engine and runs on asyncio, uvloop and trio alike. Reading and
decoding happen in the same thread call, so each image costs one hop off the event loop.
Why not aiofiles (as ``LocalFiles`` reads a large file): an image is decoded whole, so it
is read whole, and reading it in separate calls would add hops and gain nothing; the
call opens and closes the file itself, so a cancelled read cannot leave it open.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, NamedTuple

import anyio
import numpy as np
import numpy.typing as npt

from .._errors import ObjectNotFoundError, SourceError
from .._progress import Progress
from ..core import as_int, at_least, flag
from ._concurrency import PerLoop, gather_ordered
from ._local import PathLike, check_index

__all__ = ("IMAGE_EXTENSIONS", "ImageFolder", "LabeledImage")

IMAGE_EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp")
"""The file name endings ``ImageFolder`` picks up by default (compared in lower case)."""

ImageDecoder = Callable[[bytes, int, Path], Any]
"""``decode(data, index, path)``: a Pillow image or a uint8 array ``[H, W]``/``[H, W, C]``."""

logger = logging.getLogger("aioloader.samples")
_SCALE = np.float32(1.0) / np.float32(255.0)


class LabeledImage(NamedTuple):
    """One sample of an ``ImageFolder``; ``TreeCollator`` stacks a batch of them.

    Attributes:
        image: float32 ``[C, H, W]`` in ``[0, 1]`` (``to_float=True``), else the decoded
            uint8 ``[H, W, C]``.
        label: The class number.
    """

    image: npt.NDArray[Any]
    label: int


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise ImportError(
            "ImageFolder(decode='pillow') needs Pillow: pip install 'aioloader[images]'"
        ) from None
    return Image


def _check_extensions(extensions: Iterable[str]) -> tuple[str, ...]:
    if isinstance(extensions, str):
        raise TypeError(f"extensions must be a sequence of str but got one str {extensions!r}")
    endings = []
    for position, ending in enumerate(extensions):
        if not isinstance(ending, str) or not ending.startswith("."):
            raise ValueError(
                f"extensions[{position}] must be a str starting with '.' but got {ending!r}"
            )
        endings.append(ending.lower())
    return tuple(endings)


def _files(folder: Path, pattern: str, extensions: tuple[str, ...]) -> list[Path]:
    found = [p for p in folder.glob(pattern) if p.suffix.lower() in extensions and p.is_file()]
    found.sort(key=lambda p: p.relative_to(folder).as_posix())
    return found


def _check_size(size: Any) -> tuple[int, int] | None:
    if size is None:
        return None
    if not isinstance(size, (tuple, list)) or len(size) != 2:
        raise ValueError(f"size must be None or (height, width) of integers >= 1 but got {size!r}")
    return at_least("size[0] (height)", size[0], 1), at_least("size[1] (width)", size[1], 1)


class ImageFolder:
    """Image files with labels: class sub-folders of ``root``, or a list of ``(path, label)``.

    With ``classes=None`` the sub-folders of ``root`` are the classes, sorted by name and
    numbered from 0; with ``classes=[...]`` only those sub-folders, numbered in the order
    given. Inside each class folder the files matching ``pattern`` (recursive by default)
    whose name ends in one of ``extensions`` are sorted by relative path, so indices are
    stable from run to run. Or pass ``samples=[(path, label), ...]`` (relative paths are
    taken under ``root`` when it is given).

    A sample is ``LabeledImage(image, label)``: the file is read and decoded in a worker
    thread (at most ``threads`` at once per event loop), converted to ``mode``, resized to
    ``size`` (``crop="center"``: scaled to cover ``size`` keeping the aspect ratio, then
    cropped at the centre; ``crop=None``: stretched), and with ``to_float`` turned from
    uint8 ``[H, W, C]`` into float32 ``[C, H, W]`` in ``[0, 1]``. A file that cannot be read
    or decoded raises ``SourceError`` (or ``ObjectNotFoundError``) naming its path.

    Args:
        root: The folder (optional with ``samples``).
        pattern: Glob inside each class folder (``"**/*"``: every file, recursively).
        extensions: File endings to keep, compared in lower case.
        classes: Class folder names in label order (default: every sub-folder, sorted).
        samples: An explicit list of ``(path, label)`` instead of class folders.
        decode: ``"pillow"``, or ``decode(data, index, path)`` returning a Pillow image or a
            uint8 array ``[H, W]`` or ``[H, W, C]``; it runs in the worker thread.
        mode: Pillow mode to convert to (``"RGB"``, ``"L"``...); None keeps the file's.
        size: ``(height, width)`` of every image, or None to keep each file's size.
        crop: ``"center"`` or None, how ``size`` is reached (see above).
        to_float: float32 ``[C, H, W]`` in ``[0, 1]`` (True) or uint8 ``[H, W, C]``.
        threads: Most images decoded at once (per event loop).
        validate: Read and decode every file once, up front, in ``threads`` threads (with
            a progress bar on a terminal), and drop those that fail (empty, truncated,
            not an image) from the index, so ``len()`` counts only valid files. What was
            dropped is in ``invalid`` (path and reason) and logged as one warning on the
            ``aioloader.samples`` logger.

    >>> import tempfile, pathlib, anyio
    >>> from PIL import Image
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for name, shade in (("cat", 0), ("dog", 255)):
    ...     (root / name).mkdir()
    ...     Image.new("RGB", (4, 2), (shade, 0, 0)).save(root / name / "a.png")
    >>> folder = ImageFolder(root)
    >>> folder.classes, len(folder)
    (('cat', 'dog'), 2)
    >>> sample = anyio.run(folder.get_sample, 1)
    >>> sample.label, sample.image.shape, float(sample.image[0, 0, 0])
    (1, (3, 2, 4), 1.0)
    """

    def __init__(
        self,
        root: PathLike | None = None,
        *,
        pattern: str = "**/*",
        extensions: Sequence[str] = IMAGE_EXTENSIONS,
        classes: Sequence[str] | None = None,
        samples: Sequence[tuple[PathLike, int]] | None = None,
        decode: Literal["pillow"] | ImageDecoder = "pillow",
        mode: str | None = "RGB",
        size: tuple[int, int] | None = None,
        crop: Literal["center"] | None = "center",
        to_float: bool = True,
        threads: int = 8,
        validate: bool = False,
    ) -> None:
        if decode != "pillow" and not callable(decode):
            raise TypeError(f"decode must be 'pillow' or callable but got {decode!r}")
        if crop not in ("center", None):
            raise ValueError(f"crop must be 'center' or None but got {crop!r}")
        threads = at_least("threads", threads, 1)
        needs_pillow = decode == "pillow" or size is not None or mode is not None
        self._image: Any = _pillow() if needs_pillow else None
        self.decode = decode
        self.mode = mode
        self.size = _check_size(size)
        self.crop = crop
        self.to_float = bool(to_float)
        self.threads = threads
        base = None if root is None else Path(root)
        if samples is not None:
            if classes is not None:
                raise ValueError("give classes or samples, not both")
            self.classes: tuple[str, ...] = ()
            self.samples = self._explicit(samples, base)
        else:
            if base is None or not base.is_dir():
                raise ValueError(f"root must be an existing folder but got {root!r}")
            self.classes, self.samples = self._from_folders(
                base, pattern, _check_extensions(extensions), classes
            )
        self._limiter: PerLoop[anyio.CapacityLimiter] = PerLoop(
            lambda: anyio.CapacityLimiter(threads)
        )
        self.invalid: tuple[tuple[Path, str], ...] = ()
        if flag("validate", validate):
            self._drop_invalid()

    def _drop_invalid(self) -> None:
        """Decode every file once in threads; keep the samples that decode."""
        count = len(self.samples)
        bar = Progress(count, "images checked")

        def check(index: int) -> str | None:
            try:
                self.load(index)
            except Exception as exc:
                return f"{type(exc).__name__}: {exc}"
            return None

        reasons: list[str | None] = []
        with ThreadPoolExecutor(self.threads, thread_name_prefix="aioloader-validate") as pool:
            for reason in pool.map(check, range(count)):
                reasons.append(reason)
                bar.advance()
        kept = tuple(item for item, why in zip(self.samples, reasons, strict=True) if why is None)
        self.invalid = tuple(
            (item[0], why) for item, why in zip(self.samples, reasons, strict=True) if why
        )
        self.samples = kept
        if self.invalid:
            shown = ", ".join(str(path) for path, _ in self.invalid[:5])
            more = f" and {len(self.invalid) - 5} more" if len(self.invalid) > 5 else ""
            logger.warning(
                "aioloader: ImageFolder dropped %d of %d files that do not decode: %s%s",
                len(self.invalid),
                count,
                shown,
                more,
            )

    @staticmethod
    def _explicit(
        samples: Sequence[tuple[PathLike, int]], base: Path | None
    ) -> tuple[tuple[Path, int], ...]:
        pairs = []
        for position, item in enumerate(samples):
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise TypeError(f"samples[{position}] must be (path, label) but got {item!r}")
            path, label = item
            if not isinstance(path, (str, os.PathLike)):
                raise TypeError(
                    f"samples[{position}][0] must be a str or path but got {type(path).__name__}"
                )
            label = as_int(f"samples[{position}][1] (the label)", label)
            full = Path(path)
            if base is not None and not full.is_absolute():
                full = base / full
            pairs.append((full, label))
        if not pairs:
            raise ValueError("samples must hold at least one (path, label) but got none")
        return tuple(pairs)

    @staticmethod
    def _from_folders(
        root: Path, pattern: str, extensions: tuple[str, ...], classes: Sequence[str] | None
    ) -> tuple[tuple[str, ...], tuple[tuple[Path, int], ...]]:
        if classes is None:
            names = sorted(p.name for p in root.iterdir() if p.is_dir())
            if not names:
                raise ValueError(f"root {str(root)!r} must hold class sub-folders but has none")
        else:
            if isinstance(classes, str):
                raise TypeError(f"classes must be a sequence of str but got one str {classes!r}")
            names = list(classes)
            for name in names:
                if not isinstance(name, str) or not (root / name).is_dir():
                    raise ValueError(
                        f"classes must name sub-folders of {str(root)!r} but got {name!r}"
                    )
        pairs = [
            (path, label)
            for label, name in enumerate(names)
            for path in _files(root / name, pattern, extensions)
        ]
        if not pairs:
            raise ValueError(
                f"root {str(root)!r} holds no file matching pattern {pattern!r} with an "
                f"ending in {list(extensions)}"
            )
        return tuple(names), tuple(pairs)

    def __len__(self) -> int:
        return len(self.samples)

    def __repr__(self) -> str:
        return f"ImageFolder({len(self.samples)} images, {len(self.classes)} classes)"

    @property
    def paths(self) -> tuple[Path, ...]:
        """The file of every sample, in index order."""
        return tuple(path for path, _ in self.samples)

    async def get_sample(self, index: int) -> LabeledImage:
        """Read and decode image ``index`` in a worker thread."""
        position = check_index(index, len(self.samples))
        return await anyio.to_thread.run_sync(self.load, position, limiter=self._limiter.get())

    async def get_samples(self, indices: Sequence[int]) -> list[LabeledImage]:
        """Decode one batch's images concurrently; results in the order of ``indices``."""
        return await gather_ordered(self.get_sample, indices)

    def load(self, index: int) -> LabeledImage:
        """Read and decode image ``index`` on the calling thread (blocking)."""
        path, label = self.samples[check_index(index, len(self.samples))]
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ObjectNotFoundError(f"image not found: {str(path)!r}") from None
        except OSError as exc:
            raise SourceError(f"cannot read image {str(path)!r}: {exc.strerror or exc}") from exc
        try:
            pixels = self._pixels(data, index, path)
        except ValueError as exc:
            raise ValueError(
                f"decoding image {str(path)!r} (sample {index}) failed: {exc}"
            ) from exc
        except Exception as exc:
            raise SourceError(
                f"cannot decode image {str(path)!r} (sample {index}): {type(exc).__name__}: {exc}"
            ) from exc
        if not self.to_float:
            return LabeledImage(pixels, label)
        planar = pixels.transpose(2, 0, 1)
        return LabeledImage(np.multiply(planar, _SCALE, dtype=np.float32), label)

    def _pixels(self, data: bytes, index: int, path: Path) -> npt.NDArray[np.uint8]:
        image = self._image
        if self.decode == "pillow":
            decoded: Any = image.open(io.BytesIO(data))
            decoded.load()
        else:
            decoded = self.decode(data, index, path)
        if image is not None:
            if not isinstance(decoded, image.Image):
                decoded = image.fromarray(np.asarray(decoded))
            if self.mode is not None and decoded.mode != self.mode:
                decoded = decoded.convert(self.mode)
            if self.size is not None:
                decoded = self._resize(decoded)
        pixels = np.asarray(decoded)
        if pixels.dtype != np.uint8 or pixels.ndim not in (2, 3):
            raise ValueError(
                f"images must decode to uint8 [H, W] or [H, W, C] but got {pixels.dtype} "
                f"with shape {pixels.shape}"
            )
        return pixels[:, :, None] if pixels.ndim == 2 else pixels

    def _resize(self, decoded: Any) -> Any:
        height, width = self.size  # type: ignore[misc]  # only called with a size
        if self.crop is None:
            return decoded.resize((width, height), self._image.Resampling.BILINEAR)
        scale = max(height / decoded.height, width / decoded.width)
        cover = (
            max(width, round(decoded.width * scale)),
            max(height, round(decoded.height * scale)),
        )
        resized = decoded.resize(cover, self._image.Resampling.BILINEAR)
        left = (cover[0] - width) // 2
        top = (cover[1] - height) // 2
        return resized.crop((left, top, left + width, top + height))
