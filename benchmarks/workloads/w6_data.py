"""W6's and W8's data: generated JPEGs in each system's own format, the per-sample work every
system runs and the exactly-once check; also what the two workloads' rows share."""

from __future__ import annotations

import collections
import dataclasses
import io
import json
import shutil
import tempfile
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from harness import Case
from storage import missing

MIN_BYTES, MAX_BYTES = 40_000, 100_000
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32) * 255
REQUIRES = {  # what each system's rows import
    "aioloader": (),
    "webdataset": ("webdataset", "torch", "boto3"),
    "litdata": ("litdata", "torch"),
    "mosaic": ("streaming", "torch", "boto3"),
}


def label_of(i: int) -> int:
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
        rgb = image.convert("RGB").resize((224, 224), Image.Resampling.BILINEAR)
    pixels = (np.asarray(rgb, dtype=np.float32) - MEAN) / STD
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))


def collate(images: Sequence[np.ndarray], labels: Sequence[int], ids: Sequence[int]) -> dict:
    """One batch: ``image`` (B, 3, 224, 224), ``label`` and ``id`` (B,)."""
    return {
        "image": np.stack(images),
        "label": np.asarray(labels, dtype=np.int64),
        "id": np.asarray(ids, dtype=np.int64),
    }


def work(jpeg: Any, label: Any, ident: Any) -> tuple[Any, int, int]:
    """``preprocess`` as the adapters call it; ``collate_items`` batches its items."""
    return preprocess(bytes(jpeg)), int(label), int(ident)


def collate_items(items: list[tuple[Any, int, int]]) -> dict[str, Any]:
    images, labels, ids = zip(*items, strict=True)
    return collate(images, labels, ids)


def exactly_once(ids: Iterable[int], count: int) -> str:
    """``"yes"`` when ``ids`` holds each of ``0..count-1`` once, else what went wrong."""
    seen = collections.Counter(int(i) for i in ids)
    missing = count - sum(1 for i in range(count) if seen[i] > 0)
    repeated = sum(1 for n in seen.values() if n > 1)
    foreign = sum(1 for i in seen if not 0 <= i < count)
    if missing == repeated == foreign == 0:
        return "yes"
    return f"NO: {missing} missing, {repeated} repeated, {foreign} unknown"


# -- files: written once into a folder named by the size and the seed ----------------------
def cache_dir(images: int, seed: int) -> Path:
    return Path(tempfile.gettempdir()) / f"aioloader-w6-v1-{images}-{seed}"


def generate(root: Path, images: int, seed: int) -> Path:
    """``images`` JPEGs and ``done.json`` in ``root/jpeg``; returns that folder."""
    folder = root / "jpeg"
    if not (folder / "done.json").exists():
        folder.mkdir(parents=True, exist_ok=True)
        total = 0
        for i in range(images):
            data = make_jpeg(i, seed)
            if not MIN_BYTES <= len(data) <= MAX_BYTES:
                raise AssertionError(f"image {i} has {len(data)} bytes, outside 40-100 KB")
            (folder / f"{i:06d}.jpg").write_bytes(data)
            total += len(data)
        done = {"images": images, "seed": seed, "bytes": total}
        (folder / "done.json").write_text(json.dumps(done))
    return folder


def read_jpeg(folder: Path, i: int) -> bytes:
    return (folder / f"{i:06d}.jpg").read_bytes()


def dataset_bytes(folder: Path) -> int:
    return int(json.loads((folder / "done.json").read_text())["bytes"])


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def shard_files(folder: Path) -> list[Path]:
    """The shards of a format's ``folder``: tars, LitData's ``.bin`` chunks, MDS shards."""
    return sorted(p for p in folder.iterdir() if p.suffix in (".tar", ".bin", ".mds", ".zstd"))


def _once(out: Path, write: Callable[[], Any]) -> None:
    """``write()`` into ``out`` unless it did before (a half-written ``out`` is emptied)."""
    if not (out / ".done").exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        write()
        (out / ".done").touch()


def _samples(folder: Path, images: int) -> Iterable[dict[str, Any]]:
    return ({"jpg": read_jpeg(folder, i), "label": label_of(i), "id": i} for i in range(images))


def write_webdataset(
    folder: Path, images: int, out: Path, per_shard: int = 256, max_bytes: int | None = None
) -> list[Path]:
    """WebDataset ``ShardWriter`` tars of ``per_shard`` samples (``jpg``, ``cls``, ``id``) or,
    with ``max_bytes``, of ``max_bytes`` and one sample more at most (the last: what is left)."""

    def write() -> None:
        import webdataset as wds

        limits = {"maxcount": per_shard, **({"maxsize": max_bytes} if max_bytes else {})}
        with wds.ShardWriter(str(out / "shard-%06d.tar"), verbose=0, **limits) as tars:
            for s in _samples(folder, images):
                tars.write(
                    {"__key__": f"{s['id']:06d}", "jpg": s["jpg"], "cls": s["label"], "id": s["id"]}
                )

    _once(out, write)
    return sorted(out.glob("shard-*.tar"))


def _litdata_item(args: tuple[str, int]) -> dict[str, Any]:
    folder, i = args
    return {"id": i, "label": label_of(i), "jpg": read_jpeg(Path(folder), i)}


def write_formats(
    folder: Path,
    images: int,
    out: Path,
    per_shard: int,
    chunks: tuple[Any, int],
    peers: Collection[str],
    tar_bytes: int | None = None,
) -> dict[str, Path]:
    """The JPEGs' ``folder`` and, under ``out``: ``tar`` (``per_shard`` samples a shard, or
    shards of ``tar_bytes``) and, for those of ``peers`` installed, ``litdata`` (LitData's
    ``optimize``) and ``mds`` (Mosaic's ``MDSWriter``) in ``chunks`` of (LitData's, Mosaic's)
    size."""
    write_webdataset(folder, images, out / "tar", per_shard, tar_bytes)
    formats = {"jpeg": folder, "tar": out / "tar"}
    if "litdata" in peers and not missing(("litdata",)):
        import litdata

        inputs = [(str(folder), i) for i in range(images)]
        settings = {"chunk_bytes": chunks[0], "num_workers": 1, "mode": "overwrite"}
        formats["litdata"] = out / "litdata"
        _once(
            out / "litdata",
            lambda: litdata.optimize(_litdata_item, inputs, str(out / "litdata"), **settings),
        )
    if "mosaic" in peers and not missing(("streaming",)):
        from systems import mosaic

        formats["mds"] = out / "mds"
        _once(out / "mds", lambda: mosaic.write(out / "mds", _samples(folder, images), chunks[1]))
    return formats


# -- what both workloads' rows share ---------------------------------------------------------
def case(workload: str, name: str, spec: dict[str, Any], note: str, metric: str) -> Case:
    """A row's ``Case``, its ``error`` saying what is not installed (``measure`` comes later)."""
    absent = missing(REQUIRES[spec["system"]])
    error = f"not installed: {', '.join(absent)}" if absent else None
    return Case(workload, name, metric, lambda: 0.0, group=spec["system"], note=note, error=error)


def peer_loader(spec: dict[str, Any], cache: Path, cache_bytes: int | None = None) -> Any:
    """LitData's or Mosaic's ``StreamingDataLoader`` of the row (local cache of ``cache_bytes``)."""
    from systems import litdata, mosaic

    system = litdata if spec["system"] == "litdata" else mosaic
    return system.loader(spec, cache, work, collate_items, cache_bytes)


def cache_statistics(shards: Any) -> dict[str, int]:
    """The counters of aioloader's ``KnownFutureCache`` on ``shards``."""
    return {
        k: v for k, v in dataclasses.asdict(shards.cache.statistics()).items() if isinstance(v, int)
    }
