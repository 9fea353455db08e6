"""W5: a real decode workload: JPEG bytes -> Pillow decode -> 224x224 -> float32 CHW, batch 64.

512 generated JPEGs (500x375, quality 90) in memory; every row runs ``decode`` per sample
and ``ImageBatchCollator()`` per ``ShuffledSampler(512, 64)`` step, and gives bit-identical
batches (checked before timing). Images/s. docs/benchmarks.md (W5) gives each row.
"""

from __future__ import annotations

import dataclasses
import functools
import io
from collections.abc import Callable
from typing import Any

import harness
import numpy as np
from harness import Case
from systems import aioloader as aioloader_system
from systems import grain, spdl
from systems import torch as torch_system

from aioloader.core import (
    ImageBatchCollator,
    ImageSample,
    ShuffledSampler,
    rgb8_to_planar,
)
from aioloader.core._rng import SampleRng

FIELDS = ("images", "labels", "indices")
SEED = 5
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


@dataclasses.dataclass(frozen=True)
class W5Config:
    """Sizes of the workload and of one measurement."""

    images: int = 512
    batch: int = 64
    size: int = 224
    source_width: int = 500
    source_height: int = 375
    quality: int = 90
    prefetch: int = 4
    warm: int = 2  # batches consumed before the clock starts
    count: int = 8  # batches timed per measurement (one epoch)
    verify: int = 3  # batches compared across ports
    processes: bool = True  # the rows that start worker processes (left out by --quick)

    @property
    def steps_per_epoch(self) -> int:
        return self.images // self.batch


# -- data and the per-sample work ----------------------------------------------------------
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


def jpegs_of(cfg: W5Config) -> tuple[bytes, ...]:
    return make_jpegs(cfg.images, cfg.source_height, cfg.source_width, cfg.quality)


def decode(data: bytes, size: int = 224) -> np.ndarray[Any, Any]:
    """JPEG bytes to normalised float32 ``[3, size, size]`` (the per-sample work)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        image.load()
        if image.mode != "RGB":
            image = image.convert("RGB")
        resized = image.resize((size, size), Image.Resampling.BILINEAR)
    pixels = np.asarray(resized).reshape(size, 3 * size)
    return rgb8_to_planar(pixels, size, MEAN, STD)


def decode_sample(item: tuple[bytes, int], rng: SampleRng | None = None) -> ImageSample:
    """``(jpeg, label)`` to an ``ImageSample`` (aioloader's transform; ``rng`` unused)."""
    return ImageSample(decode(item[0]), (), item[1])


def items_of(jpegs: tuple[bytes, ...]) -> list[tuple[bytes, int]]:
    return [(data, index % 10) for index, data in enumerate(jpegs)]


def parts(cfg: W5Config) -> tuple[ShuffledSampler, ImageBatchCollator]:
    return ShuffledSampler(cfg.images, cfg.batch), ImageBatchCollator()


def step_builder(cfg: W5Config, items: list[tuple[bytes, int]], detach: bool) -> Any:
    """``g -> batch``: plan, decode every sample, collate (pickled with its data)."""
    fields = FIELDS if detach else ()
    builder = functools.partial(parts, cfg)
    return harness.StepBuilder(SEED, builder, items, None, decode_sample, fields)


# -- the systems ------------------------------------------------------------------------
class PlainLoop(harness.Steps):
    group = "hand-written"
    name = "plain Python loop (1 thread)"
    note = "for each step: decode every sample in a list comprehension, np.stack"

    def __init__(self, cfg: W5Config, items: list[tuple[bytes, int]]) -> None:
        self.cfg, self.items = cfg, items
        self.sampler = ShuffledSampler(cfg.images, cfg.batch)

    def step(self, g: int) -> dict[str, np.ndarray[Any, Any]]:
        epoch, step = divmod(g, self.cfg.steps_per_epoch)
        order = self.sampler.indices(SEED, epoch, step).tolist()
        return {
            "images": np.stack([decode(self.items[i][0]) for i in order]),
            "labels": np.array([self.items[i][1] for i in order], np.int32),
            "indices": np.array(order, np.int32),
        }


class Aioloader(aioloader_system.Aioloader):
    """``DataLoader(transform=decode, workers=w)`` on asyncio; images/s."""

    def __init__(
        self,
        cfg: W5Config,
        items: list[tuple[bytes, int]],
        workers: int | str,
        executor: str | None = None,
    ) -> None:
        from aioloader import DataLoader
        from aioloader.testing import MemoryDataset

        dataset = MemoryDataset(items)
        options: dict[str, Any] = {"executor": executor} if executor else {}
        prefetch: int | str = "auto" if workers == "auto" else cfg.prefetch

        def make() -> Any:
            return DataLoader(
                dataset,
                ShuffledSampler(cfg.images, cfg.batch),
                ImageBatchCollator(),
                seed=SEED,
                transform=decode_sample,
                workers=workers,
                prefetch=prefetch,
                **options,
            )

        super().__init__(make, uvloop=False)
        kind = "processes" if executor == "process" else "workers"
        self.name = f"aioloader {kind}={workers}"
        extra = f", executor={executor!r}" if executor else ""
        self.note = (
            f"DataLoader(transform=decode, workers={workers!r}{extra}, prefetch={prefetch!r}), "
            "async for, asyncio"
        )


def torch_parts(cfg: W5Config, items: list[tuple[bytes, int]], workers: int, stop: int) -> Any:
    """torch: the dataset decodes, our order, our collator as ``collate_fn`` (tensors out of
    workers)."""
    order = torch_system.StepSampler(ShuffledSampler(cfg.images, cfg.batch), SEED, stop)
    tensors = torch_system.copied_tensors(FIELDS) if workers else None
    collate = torch_system.PlanCollate(ImageBatchCollator(), SEED, cfg.steps_per_epoch, tensors)
    return torch_system.KeyedDataset(items, decode_sample), order, collate


def grain_row(cfg: W5Config, items: list[tuple[bytes, int]], processes: bool) -> grain.Grain:
    """Grain over the step builder: 2 threads, or 2 processes returning plain arrays."""
    step = step_builder(cfg, items, detach=processes)
    if processes:
        return grain.Grain(step, prefetch=1, processes=2, per_worker=2)
    return grain.Grain(step, threads=2, prefetch=cfg.prefetch)


# -- rows, verification and cases --------------------------------------------------------
def systems(cfg: W5Config, items: list[tuple[bytes, int]], log: Callable[[str], None]) -> Any:
    found: list[harness.Port] = [PlainLoop(cfg, items)]
    found += [Aioloader(cfg, items, w) for w in (0, 1, 2, "auto")]
    found.append(Aioloader(cfg, items, 2, executor="process"))
    spawn = (False, True) if cfg.processes else (False,)
    how = "dataset decodes, our sampler order and collator as collate_fn"
    torch_parts_of = functools.partial(torch_parts, cfg, items)
    optional: list[tuple[str, Callable[[], list[Any]]]] = [
        (
            "torch",
            lambda: torch_system.rows((0, 1, 2) if cfg.processes else (0,), torch_parts_of, how),
        ),
        ("spdl", lambda: [spdl.Spdl(step_builder(cfg, items, False), 2, sink=4)]),
        ("grain", lambda: [grain_row(cfg, items, p) for p in spawn]),
    ]
    found += harness.installed_rows("W5", optional, log)
    return found


def cases(cfg: W5Config, log: Callable[[str], None]) -> list[Case]:
    """Build, verify and wrap every W5 port as a ``Case`` (images/s)."""
    jpegs = jpegs_of(cfg)
    sizes = [len(data) for data in jpegs]
    log(
        f"  W5: {len(jpegs)} JPEGs, {min(sizes) / 1e3:.0f}-{max(sizes) / 1e3:.0f} KB "
        f"(mean {sum(sizes) / len(sizes) / 1e3:.0f} KB)"
    )
    items = items_of(jpegs)
    found = systems(cfg, items, log)
    harness.verify("W5", found, cfg.verify, harness.fields(FIELDS), log)
    facts = {"mean JPEG size (KB)": round(sum(sizes) / len(sizes) / 1e3, 1)}
    return [
        harness.port_case(
            "W5",
            system,
            "images/s",
            cfg.warm,
            cfg.count,
            isinstance(system, PlainLoop),
            facts,
            scale=cfg.batch,
        )
        for system in found
    ]


# -- the workload, as run.py crosses it -----------------------------------------------------
NAME = "W5"
TITLE = "JPEG decode (512 images of 50-90 KB, Pillow), resize 224x224, float32 CHW, batch 64"
NOTES = [
    "All rows give bit-identical batches (checked on 3 steps before timing). Images/s over "
    "8 batches (one epoch) after 2 untimed ones per round. Ratios against the plain loop.",
]


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W5's cases and notes (``quick``: 16 small JPEGs, no process rows)."""
    cfg = (
        W5Config(
            images=16,
            batch=8,
            source_width=160,
            source_height=120,
            warm=1,
            count=2,
            verify=2,
            processes=False,
        )
        if quick
        else W5Config()
    )
    log("W5: generating JPEGs, building and checking every port")
    return cases(cfg, log), NOTES + ([f"Quick run: {cfg}."] if quick else [])


def targets(found: list[Case]) -> list[dict[str, Any]]:
    """aioloader's 2 workers against its 0 workers and against torch's best."""
    if not any(c.workload == "W5" for c in found):
        return []
    zero = harness.best(found, "W5", "aioloader", "aioloader workers=0")
    two = harness.best(found, "W5", "aioloader", "aioloader workers=2")
    torch_best = harness.best(found, "W5", "torch")
    return [
        harness.target("W5: aioloader workers=2 >= 1.8x workers=0", two, zero, 1.8),
        harness.target("W5: aioloader workers=2 >= 1.5x torch best", two, torch_best, 1.5),
        harness.auto_target(
            found,
            "W5",
            "aioloader workers=auto",
            [f"aioloader workers={w}" for w in (0, 1, 2)] + ["aioloader processes=2"],
        ),
    ]
