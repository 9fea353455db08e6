"""W5: a real decode workload: JPEG bytes -> Pillow decode -> 224x224 -> float32 CHW, batch 64.

512 JPEGs (500x375, quality 90, about 50-90 KB: gradients, smooth blobs and sensor-like
noise of a random strength, drawn from ``numpy.random.default_rng(5)``) are held in memory
as bytes. Every port does the same per-sample work, ``decode``: ``Image.open`` + ``load``
(the JPEG decode), ``resize((224, 224), BILINEAR)``, then ``rgb8_to_planar`` with the
ImageNet mean and std (float32 ``[3, 224, 224]``); the batch is ``ImageBatchCollator()``
over the 64 samples of a ``ShuffledSampler(512, 64)`` step (label = index % 10). Pillow's
decode and resize and aioloader's kernels release the GIL, so threads can use every core.
Batches are checked bit-identical across ports before timing. The metric is images/s.

- plain loop: one thread, ``[decode(b) for b in batch]`` then ``np.stack`` (the baseline).
- aioloader: ``DataLoader(..., transform=decode, workers=w, prefetch=4)``, ``async for``.
- torch: ``DataLoader(num_workers=w)``, a map-style dataset that decodes, our sampler's
  order and collator as ``collate_fn`` (shared-memory tensors out of workers, as in W1).
- SPDL and Grain: a step builder (plan, decode 64, collate) on 2 threads, as in W1.
- aioloader processes: the row appears once ``DataLoader`` takes ``executor`` (see
  ``process_rows``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import io
from collections.abc import Callable, Iterator
from typing import Any

import harness
import numpy as np
from harness import Case
from systems import aioloader as aioloader_system
from systems import grain, spdl
from systems import torch as torch_system

from aioloader.core import (
    BatchPlan,
    ImageBatch,
    ImageBatchCollator,
    ImageSample,
    ShuffledSampler,
    plan_batch,
    rgb8_to_planar,
)
from aioloader.core._rng import SampleRng
from workloads.w1_images import System, release

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


def to_arrays(batch: Any) -> dict[str, np.ndarray[Any, Any]]:
    """Any port's batch as numpy arrays (copies)."""
    if isinstance(batch, ImageBatch):
        return {name: np.array(getattr(batch, name)) for name in FIELDS}
    return {name: np.array(np.asarray(batch[name])) for name in FIELDS}


class StepBuilder:
    """``g -> batch``: plan, decode every sample, collate (picklable with its data)."""

    def __init__(self, cfg: W5Config, items: list[tuple[bytes, int]], detach: bool) -> None:
        self.cfg, self.items, self.detach = cfg, items, detach
        self._setup()

    def _setup(self) -> None:
        self.sampler = ShuffledSampler(self.cfg.images, self.cfg.batch)
        self.collator = ImageBatchCollator()

    def __getstate__(self) -> dict[str, Any]:
        return {"cfg": self.cfg, "items": self.items, "detach": self.detach}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.cfg, self.items, self.detach = state["cfg"], state["items"], state["detach"]
        self._setup()

    def __call__(self, g: int) -> Any:
        plan = plan_batch(self.sampler, SEED, g)
        samples = [decode_sample(self.items[i]) for i in plan.indices.tolist()]
        batch = self.collator(samples, plan)
        if not self.detach:
            return batch
        return {name: getattr(batch, name) for name in FIELDS}


# -- the systems ------------------------------------------------------------------------
class W5System(System):
    """A W5 port; ``measure`` returns images per second."""

    def measure(self, warm: int, count: int) -> float:
        return super().measure(warm, count) * self.batch_size

    batch_size = 64


class PlainLoop(W5System):
    group = "hand-written"
    name = "plain Python loop (1 thread)"
    note = "for each step: decode every sample in a list comprehension, np.stack"

    def __init__(self, cfg: W5Config, items: list[tuple[bytes, int]]) -> None:
        self.cfg, self.items, self.batch_size = cfg, items, cfg.batch
        self.sampler = ShuffledSampler(cfg.images, cfg.batch)

    def step(self, g: int) -> dict[str, np.ndarray[Any, Any]]:
        epoch, step = divmod(g, self.cfg.steps_per_epoch)
        order = self.sampler.indices(SEED, epoch, step).tolist()
        return {
            "images": np.stack([decode(self.items[i][0]) for i in order]),
            "labels": np.array([self.items[i][1] for i in order], np.int32),
            "indices": np.array(order, np.int32),
        }

    @contextlib.contextmanager
    def batches(self, stop: int) -> Iterator[Iterator[Any]]:
        yield (self.step(g) for g in range(stop))


class Aioloader(W5System, aioloader_system.Aioloader):
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

        aioloader_system.Aioloader.__init__(self, make, uvloop=False)
        self.batch_size = cfg.batch
        kind = "processes" if executor == "process" else "workers"
        self.name = f"aioloader {kind}={workers}"
        extra = f", executor={executor!r}" if executor else ""
        self.note = (
            f"DataLoader(transform=decode, workers={workers!r}{extra}, prefetch={prefetch!r}), "
            "async for, asyncio"
        )


class TorchDataset:
    """Map-style dataset keyed by ``(g, index)`` that decodes in ``__getitem__``."""

    def __init__(self, items: list[tuple[bytes, int]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, key: tuple[int, int]) -> tuple[tuple[int, int], ImageSample]:
        return key, decode_sample(self.items[key[1]])


class TorchCollate:
    """Our collator as ``collate_fn``; out of a worker, the batch leaves as shared tensors."""

    def __init__(self, cfg: W5Config, shared: bool) -> None:
        self.cfg, self.shared = cfg, shared
        self.collator = ImageBatchCollator()

    def __call__(self, items: list[tuple[tuple[int, int], ImageSample]]) -> Any:
        g = items[0][0][0]
        epoch, step = divmod(g, self.cfg.steps_per_epoch)
        indices = np.array([key[1] for key, _ in items], dtype=np.int64)
        batch = self.collator([s for _, s in items], BatchPlan(SEED, g, epoch, step, indices))
        if not self.shared:
            return batch
        import torch

        with batch:
            return {name: torch.from_numpy(np.array(getattr(batch, name))) for name in FIELDS}


class Torch(torch_system.Torch, W5System):
    """torch: the dataset decodes, our order, our collator as ``collate_fn``."""

    def __init__(self, cfg: W5Config, items: list[tuple[bytes, int]], workers: int) -> None:
        def parts(stop: int) -> tuple[Any, Any, Any]:
            order = torch_system.StepSampler(ShuffledSampler(cfg.images, cfg.batch), SEED, stop)
            return TorchDataset(items), order, TorchCollate(cfg, shared=workers > 0)

        how = "dataset decodes, our sampler order and collator as collate_fn"
        super().__init__(workers, parts, how)
        self.batch_size = cfg.batch


class Spdl(spdl.Spdl, W5System):
    """SPDL over ``StepBuilder`` (sink of 4 batches)."""

    def __init__(self, cfg: W5Config, items: list[tuple[bytes, int]], threads: int) -> None:
        super().__init__(StepBuilder(cfg, items, detach=False), threads, sink=4)
        self.batch_size = cfg.batch


class Grain(grain.Grain, W5System):
    """Grain over ``StepBuilder``: 2 threads, or 2 processes returning plain arrays."""

    def __init__(self, cfg: W5Config, items: list[tuple[bytes, int]], processes: bool) -> None:
        step = StepBuilder(cfg, items, detach=processes)
        if processes:
            super().__init__(step, prefetch=1, processes=2, per_worker=2)
        else:
            super().__init__(step, threads=2, prefetch=cfg.prefetch)
        self.batch_size = cfg.batch


# -- rows, verification and cases --------------------------------------------------------
def process_rows(cfg: W5Config, items: list[tuple[bytes, int]]) -> list[System]:
    """HOOK for the lead: "aioloader processes=2", once ``DataLoader`` takes ``executor``.

    Until the process executor is merged the row is left out (and the log says so); after
    the merge it appears by itself if the keyword is ``executor="process"``; adjust here
    if the executor's API differs.
    """
    from aioloader import DataLoader

    if "executor" not in inspect.signature(DataLoader).parameters:
        return []
    return [Aioloader(cfg, items, 2, executor="process")]


def systems(cfg: W5Config, items: list[tuple[bytes, int]], log: Callable[[str], None]) -> Any:
    found: list[System] = [PlainLoop(cfg, items)]
    found += [Aioloader(cfg, items, w) for w in (0, 1, 2, "auto")]
    processes = process_rows(cfg, items)
    if not processes:
        log("  W5: DataLoader has no executor= yet; the 'aioloader processes=2' row is left out")
    found += processes
    spawn = (False, True) if cfg.processes else (False,)
    optional: list[tuple[str, Callable[[], list[System]]]] = [
        ("torch", lambda: [Torch(cfg, items, w) for w in ((0, 1, 2) if cfg.processes else (0,))]),
        ("spdl", lambda: [Spdl(cfg, items, 2)]),
        ("grain", lambda: [Grain(cfg, items, p) for p in spawn]),
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
    verify(found, cfg, log)
    facts = {"mean JPEG size (KB)": round(sum(sizes) / len(sizes) / 1e3, 1)}
    return [
        harness.port_case(
            "W5", system, "images/s", cfg.warm, cfg.count, isinstance(system, PlainLoop), facts
        )
        for system in found
    ]


def verify(found: list[System], cfg: W5Config, log: Callable[[str], None]) -> None:
    """Every port gives the plain loop's batches, bit for bit (images, labels, indices)."""
    expected: list[dict[str, np.ndarray[Any, Any]]] = []
    for system in found:
        got = []
        with system.batches(cfg.verify) as batches:
            for batch in batches:
                got.append(to_arrays(batch))
                release(batch)
        if not expected:
            expected = got
            continue
        if len(got) != len(expected):
            raise AssertionError(f"{system.name}: {len(got)} batches, expected {len(expected)}")
        for step, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
            for name in FIELDS:
                a, b = mine[name], theirs[name]
                if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
                    raise AssertionError(f"{system.name}: step {step} {name} differs")
        log(f"  W5 {system.name}: {len(got)} batches bit-identical")


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
