"""W6's (and W8's) data: generated JPEGs, each system's shard format, the per-sample work
every system runs and the exactly-once check. docs/benchmarks.md (W6) describes the images.
"""

from __future__ import annotations

import collections
import io
import json
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

MIN_BYTES, MAX_BYTES = 40_000, 100_000
SIZE = 224
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32) * 255
WDS_SAMPLES_PER_SHARD = 256
CHUNK_BYTES = 64 * 2**20  # LitData's and Mosaic's documented chunk/shard size


def label_of(i: int) -> int:
    """The class label of sample ``i``."""
    return (i * 7919) % 1000


def make_jpeg(i: int, seed: int) -> bytes:
    """Image ``i`` of the data set drawn with ``seed``: 40-100 KB of JPEG."""
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng([seed, i])
    width, height = int(rng.integers(360, 500)), int(rng.integers(288, 400))
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    start, end = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    angle = rng.uniform(0, 2 * np.pi)
    t = x * np.cos(angle) + y * np.sin(angle)
    t = (t - t.min()) / (t.max() - t.min() + 1e-6)
    pixels = start * (1 - t[..., None]) + end * t[..., None]
    image = Image.fromarray(pixels.astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(6, 16))):
        x0, y0 = rng.uniform(-50, width), rng.uniform(-50, height)
        box = [x0, y0, x0 + rng.uniform(20, width / 2), y0 + rng.uniform(20, height / 2)]
        fill = tuple(int(v) for v in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=fill)
    image = image.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.5, 2.0))))
    noisy = np.asarray(image, dtype=np.float32)
    noisy += rng.normal(0, rng.uniform(9, 16), noisy.shape).astype(np.float32)
    image = Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))
    data = b""
    for quality in (90, 95, 97, 85, 80, 70):
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=quality)
        data = buffer.getvalue()
        if MIN_BYTES <= len(data) <= MAX_BYTES:
            return data
    return data  # the caller checks the range


def preprocess(jpeg: bytes) -> np.ndarray:
    """The per-sample work of every system: decode, resize to 224x224, normalise, CHW float32."""
    from PIL import Image

    with Image.open(io.BytesIO(jpeg)) as image:
        rgb = image.convert("RGB").resize((SIZE, SIZE), Image.Resampling.BILINEAR)
    pixels = (np.asarray(rgb, dtype=np.float32) - MEAN) / STD
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))


def collate(images: Sequence[np.ndarray], labels: Sequence[int], ids: Sequence[int]) -> dict:
    """One batch as numpy arrays: ``image`` (B, 3, 224, 224), ``label`` and ``id`` (B,)."""
    return {
        "image": np.stack(images),
        "label": np.asarray(labels, dtype=np.int64),
        "id": np.asarray(ids, dtype=np.int64),
    }


def exactly_once(ids: Iterable[int], count: int) -> str:
    """``"yes"`` when ``ids`` holds each of ``0..count-1`` once, else what went wrong."""
    seen = collections.Counter(int(i) for i in ids)
    missing = count - sum(1 for i in range(count) if seen[i] > 0)
    repeated = sum(1 for n in seen.values() if n > 1)
    foreign = sum(1 for i in seen if not 0 <= i < count)
    if missing == repeated == foreign == 0:
        return "yes"
    return f"NO: {missing} missing, {repeated} repeated, {foreign} unknown"


# -- the cache directory ----------------------------------------------------------------
def cache_dir(images: int, seed: int) -> Path:
    """Where the images and the shard formats of this size and seed live."""
    return Path(tempfile.gettempdir()) / f"aioloader-w6-v1-{images}-{seed}"


def generate(root: Path, images: int, seed: int) -> Path:
    """Write ``images`` JPEGs and their labels under ``root/jpeg`` (once); returns the folder."""
    folder = root / "jpeg"
    done = folder / "done.json"
    if done.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    sizes = []
    for i in range(images):
        data = make_jpeg(i, seed)
        if not MIN_BYTES <= len(data) <= MAX_BYTES:
            raise AssertionError(f"image {i} has {len(data)} bytes, outside 40-100 KB")
        (folder / f"{i:06d}.jpg").write_bytes(data)
        sizes.append(len(data))
    done.write_text(json.dumps({"images": images, "seed": seed, "bytes": sum(sizes)}))
    return folder


def read_jpeg(folder: Path, i: int) -> bytes:
    return (folder / f"{i:06d}.jpg").read_bytes()


def dataset_bytes(folder: Path) -> int:
    """Total JPEG bytes of the generated set."""
    return int(json.loads((folder / "done.json").read_text())["bytes"])


def _fresh(path: Path) -> bool:
    """True when ``path`` still has to be written (a half-written one is emptied)."""
    if (path / ".done").exists():
        return False
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return True


def write_webdataset(
    folder: Path, images: int, out: Path, per_shard: int = WDS_SAMPLES_PER_SHARD
) -> list[Path]:
    """WebDataset ``ShardWriter`` shards of ``per_shard`` samples: ``jpg``, ``cls``, ``id``."""
    if _fresh(out):
        import webdataset as wds

        pattern = str(out / "shard-%06d.tar")
        with wds.ShardWriter(pattern, maxcount=per_shard, verbose=0) as writer:
            for i in range(images):
                jpeg = read_jpeg(folder, i)
                writer.write({"__key__": f"{i:06d}", "jpg": jpeg, "cls": label_of(i), "id": i})
        (out / ".done").touch()
    return sorted(out.glob("shard-*.tar"))


def _litdata_item(args: tuple[str, int]) -> dict[str, Any]:
    folder, i = args
    return {"id": i, "label": label_of(i), "jpg": read_jpeg(Path(folder), i)}


def write_litdata(folder: Path, images: int, out: Path, chunk_bytes: int | str = "64MB") -> None:
    """LitData ``optimize`` chunks of ``chunk_bytes``, in input order (one writer)."""
    if _fresh(out):
        import litdata

        litdata.optimize(
            fn=_litdata_item,
            inputs=[(str(folder), i) for i in range(images)],
            output_dir=str(out),
            chunk_bytes=chunk_bytes,
            num_workers=1,
            mode="overwrite",
        )
        (out / ".done").touch()


def write_mosaic(folder: Path, images: int, out: Path, chunk_bytes: int = CHUNK_BYTES) -> None:
    """Mosaic ``MDSWriter`` shards of ``chunk_bytes`` (its default limit), no compression."""
    if _fresh(out):
        from systems import mosaic

        samples = (
            {"jpg": read_jpeg(folder, i), "label": label_of(i), "id": i} for i in range(images)
        )
        mosaic.write(out, samples, chunk_bytes)
        (out / ".done").touch()


def folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (0 when it does not exist)."""
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def work(jpeg: Any, label: Any, ident: Any) -> tuple[Any, int, int]:
    """The per-sample work of W6 and W8: ``preprocess`` the JPEG, keep label and id."""
    return preprocess(bytes(jpeg)), int(label), int(ident)


def collate_items(items: list[tuple[Any, int, int]]) -> dict[str, Any]:
    """``collate`` of ``work``'s items."""
    images, labels, ids = zip(*items, strict=True)
    return collate(images, labels, ids)
