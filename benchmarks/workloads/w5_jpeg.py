"""W5: a real decode workload: JPEG bytes -> Pillow decode -> 224x224 -> float32 CHW.

Generated JPEGs in memory; every row runs ``decode`` per sample and ``ImageBatchCollator()``
per ``ShuffledSampler`` step. docs/benchmarks.md (W5) gives each row.
"""

from __future__ import annotations

import dataclasses
import functools
import io
from collections.abc import Callable
from typing import Any

import harness
import numpy as np
from systems import aioloader as aioloader_system
from systems import grain, spdl
from systems import torch as torch_system

from aioloader import takes_rng
from aioloader.core import ImageBatchCollator, ImageSample, ShuffledSampler, rgb8_to_planar
from aioloader.testing import MemoryDataset

NAME = "W5"
TITLE = "JPEG decode (512 images of 50-90 KB, Pillow), resize 224x224, float32 CHW, batch 64"
NOTES = [
    "All rows give bit-identical batches (checked on 3 steps before timing). Images/s over "
    "8 batches (one epoch) after 2 untimed ones per round. Ratios against the plain loop.",
]

FIELDS = ("images", "labels", "indices")
SEED = 5
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


@dataclasses.dataclass(frozen=True)
class W5Config:
    images: int = 512
    batch: int = 64
    size: int = 224
    source_width: int = 500
    source_height: int = 375
    quality: int = 90
    prefetch: int = 4
    warm: int = 2
    count: int = 8  # one epoch
    verify: int = 3
    processes: bool = True  # the rows that start worker processes (left out by --quick)


def _picture(generator: np.random.Generator, height: int, width: int) -> Any:
    """A photo-like RGB image: a colour gradient, smooth blobs and fine noise."""
    from PIL import Image

    rows = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
    columns = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :, None]
    base = generator.uniform(50, 200, 3).astype(np.float32)
    slopes = generator.uniform(-80, 80, (2, 3)).astype(np.float32)
    pixels = base + rows * slopes[0] + columns * slopes[1]
    coarse = generator.integers(0, 256, (height // 24 + 2, width // 24 + 2, 3), dtype=np.uint8)
    blobs = Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC)
    pixels += (np.asarray(blobs, np.float32) - 128.0) * 0.5
    grain = generator.uniform(6.0, 16.0)  # sensor noise: sets the file size, 50-90 KB
    pixels += generator.standard_normal((height, width, 3), dtype=np.float32) * grain
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


@functools.lru_cache(maxsize=2)
def make_jpegs(count: int, height: int, width: int, quality: int) -> tuple[bytes, ...]:
    """The dataset: ``count`` JPEG files as bytes (deterministic)."""
    generator = np.random.default_rng(SEED)
    out = []
    for _ in range(count):
        buffer = io.BytesIO()
        _picture(generator, height, width).save(buffer, "JPEG", quality=quality)
        out.append(buffer.getvalue())
    return tuple(out)


def decode(data: bytes, size: int = 224) -> np.ndarray[Any, Any]:
    """JPEG bytes to normalised float32 ``[3, size, size]`` (the per-sample work)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        image.load()
        if image.mode != "RGB":
            image = image.convert("RGB")
        resized = image.resize((size, size), Image.Resampling.BILINEAR)
    return rgb8_to_planar(np.asarray(resized).reshape(size, 3 * size), size, MEAN, STD)


@takes_rng
def decode_sample(item: tuple[bytes, int], rng: Any = None) -> ImageSample:
    """``(jpeg, label)`` to an ``ImageSample`` (aioloader's transform; ``rng`` unused)."""
    return ImageSample(decode(item[0]), (), item[1])


def parts(cfg: W5Config) -> tuple[ShuffledSampler, ImageBatchCollator]:
    return ShuffledSampler(cfg.images, cfg.batch), ImageBatchCollator()


class PlainLoop(harness.Steps):
    group = "hand-written"
    name = "plain Python loop (1 thread)"
    note = "for each step: decode every sample in a list comprehension, np.stack"

    def __init__(self, cfg: W5Config, items: list[tuple[bytes, int]]) -> None:
        self.items, self.sampler = items, parts(cfg)[0]

    def step(self, g: int) -> dict[str, np.ndarray[Any, Any]]:
        epoch, step = divmod(g, self.sampler.steps_per_epoch)
        order = self.sampler.indices(SEED, epoch, step).tolist()
        return {
            "images": np.stack([decode(self.items[i][0]) for i in order]),
            "labels": np.array([self.items[i][1] for i in order], np.int32),
            "indices": np.array(order, np.int32),
        }


def aioloader_row(
    cfg: W5Config,
    items: list[Any],
    workers: int | str,
    executor: str = "",
    transform: Callable[..., Any] = decode_sample,
    parts_of: Callable[[W5Config], tuple[Any, Any]] = parts,
) -> Any:
    """``DataLoader(transform=..., workers=w)`` on asyncio, fresh parts per loader (W5, W5J)."""
    prefetch: int | str = "auto" if workers == "auto" else cfg.prefetch
    options = {"transform": transform, "workers": workers, "prefetch": prefetch}
    options |= {"executor": executor} if executor else {}
    loader_parts = functools.partial(parts_of, cfg)
    make = aioloader_system.maker(MemoryDataset(items), loader_parts, SEED, **options)
    name = f"aioloader {'processes' if executor == 'process' else 'workers'}={workers}"
    extra = f", executor={executor!r}" if executor else ""
    what = transform.__name__
    note = f"DataLoader(transform={what}, workers={workers!r}{extra}, prefetch={prefetch!r})"
    return aioloader_system.Aioloader(make, False, name=name, note=f"{note}, async for, asyncio")


def step_builder(cfg: W5Config, items: list[Any], fields: tuple[str, ...] = ()) -> Any:
    """``g -> batch``: plan, decode every sample, collate (pickled with its data)."""
    return harness.StepBuilder(
        SEED, functools.partial(parts, cfg), items, None, decode_sample, fields
    )


def rows(cfg: W5Config, items: list[tuple[bytes, int]], log: Callable[[str], None]) -> Any:
    """Every W5 row that can be built here (a missing package is logged and skipped)."""
    found: list[Any] = [PlainLoop(cfg, items)]
    found += [aioloader_row(cfg, items, w) for w in (0, 1, 2, "auto")]
    found.append(aioloader_row(cfg, items, 2, executor="process"))
    dataset = torch_system.Dataset(items, decode_sample)
    how = "dataset decodes, our sampler order and collator as collate_fn"

    def torch_row(workers: int) -> torch_system.Torch:
        sampler, collator = parts(cfg)
        collate = torch_system.PlanCollate(collator, sampler, SEED, FIELDS if workers else ())
        return torch_system.Torch(workers, how, dataset, sampler, SEED, collate)

    def grain_rows() -> list[Any]:
        found = [grain.Grain(step_builder(cfg, items), threads=2, prefetch=cfg.prefetch)]
        if cfg.processes:  # 2 processes, returning plain arrays
            step = step_builder(cfg, items, FIELDS)
            found.append(grain.Grain(step, prefetch=1, processes=2, buffer=2))
        return found

    optional: list[tuple[str, Callable[[], list[Any]]]] = [
        ("torch", lambda: [torch_row(w) for w in ((0, 1, 2) if cfg.processes else (0,))]),
        ("spdl", lambda: [spdl.Spdl(step_builder(cfg, items), 2, sink=4)]),
        ("grain", grain_rows),
    ]
    return found + harness.installed_rows("W5", optional, log)


# -- the workload, as run.py crosses it -----------------------------------------------------
def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W5's cases and notes (``quick``: 16 small JPEGs, no process rows)."""
    small = {"images": 16, "batch": 8, "source_width": 160, "source_height": 120}
    cfg = W5Config(**small, warm=1, count=2, verify=2, processes=False) if quick else W5Config()
    log("W5: generating JPEGs, building and checking every port")
    jpegs = make_jpegs(cfg.images, cfg.source_height, cfg.source_width, cfg.quality)
    sizes = [len(data) for data in jpegs]
    mean = sum(sizes) / len(sizes) / 1e3
    low, high = min(sizes) / 1e3, max(sizes) / 1e3
    log(f"  W5: {len(jpegs)} JPEGs, {low:.0f}-{high:.0f} KB (mean {mean:.0f} KB)")
    found = rows(cfg, [(data, index % 10) for index, data in enumerate(jpegs)], log)
    harness.verify("W5", found, cfg.verify, harness.fields(FIELDS), log)
    facts = {"mean JPEG size (KB)": round(mean, 1)}
    baseline = [isinstance(row, PlainLoop) for row in found]
    cases = [
        harness.port_case("W5", row, "images/s", cfg.warm, cfg.count, base, facts, cfg.batch)
        for row, base in zip(found, baseline, strict=True)
    ]
    return cases, NOTES + ([f"Quick run: {cfg}."] if quick else [])


def targets(found: list[harness.Case]) -> list[dict[str, Any]]:
    """aioloader's 2 workers against its 0 workers and against torch's best."""
    if not any(c.workload == "W5" for c in found):
        return []
    zero = harness.best(found, "W5", "aioloader", "aioloader workers=0")
    two = harness.best(found, "W5", "aioloader", "aioloader workers=2")
    torch_best = harness.best(found, "W5", "torch")
    grid = [f"aioloader workers={w}" for w in (0, 1, 2)] + ["aioloader processes=2"]
    return [
        harness.target("W5: aioloader workers=2 >= 1.8x workers=0", two, zero, 1.8),
        harness.target("W5: aioloader workers=2 >= 1.5x torch best", two, torch_best, 1.5),
        harness.auto_target(found, "W5", "aioloader workers=auto", grid),
    ]
