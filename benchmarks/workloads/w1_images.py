"""W1: synthetic line images (``aioloader.datasets.line_images``) through every loader.

``[1, 32, W]`` images, W in 64..256, width multiple 4, ``GainOffset()`` per image, shuffled.
docs/benchmarks.md (W1) gives each row's configuration.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import harness
import numpy as np
from systems import aioloader as aioloader_system
from systems import grain, spdl
from systems import torch as torch_system

from aioloader.core import GainOffset, ImageBatchCollator, RngStream, ShuffledSampler, plan_batch
from aioloader.datasets import line_images
from aioloader.testing import MemoryDataset

NAME = "W1"
TITLE = (
    "synthetic line images (2,048 images, C=1, H=32, W 64..256, batch 128, width multiple 4, "
    "GainOffset, shuffled)"
)
NOTES = [
    "All rows but the floors give bit-identical batches (checked on 17 steps across an "
    "epoch boundary before timing); the floors give the same image shapes. The consumer "
    "releases each batch and does nothing else. Batches/s over 256 batches after 16 "
    "untimed ones (startup, prefetch fill) per round.",
]

FIELDS = ("images", "widths", "targets", "target_lengths", "labels", "indices")
SEED = 0


@dataclasses.dataclass(frozen=True)
class W1Config:
    """Sizes: ``warm`` untimed batches (startup, prefetch fill), then ``count`` timed;
    ``verify`` batches compared across rows (crossing an epoch boundary)."""

    images: int = 2048
    height: int = 32
    min_width: int = 64
    max_width: int = 256
    batch: int = 128
    multiple: int = 4
    prefetch: int = 8
    warm: int = 16
    count: int = 256
    verify: int = 17

    @property
    def steps_per_epoch(self) -> int:
        return self.images // self.batch


def make_samples(cfg: W1Config) -> list[Any]:
    """The dataset's samples (deterministic from the config)."""
    dataset = line_images(cfg.images, cfg.height, cfg.min_width, cfg.max_width, seed=SEED)
    return list(dataset._samples)


def parts(cfg: W1Config) -> tuple[ShuffledSampler, ImageBatchCollator]:
    """The sampler and the collator of every loader."""
    return ShuffledSampler(cfg.images, cfg.batch), ImageBatchCollator(
        cfg.multiple, augment=GainOffset()
    )


class Aioloader(aioloader_system.Aioloader):
    """``DataLoader(workers=w, prefetch=8)`` over the samples in memory, asyncio or uvloop."""

    def __init__(self, cfg: W1Config, samples: list[Any], workers: int | str, uvloop: bool) -> None:
        prefetch: int | str = "auto" if workers == "auto" else cfg.prefetch
        collator = parts(cfg)[1]  # one per row; a sampler per loader

        def loader_parts() -> tuple[ShuffledSampler, ImageBatchCollator]:
            return ShuffledSampler(cfg.images, cfg.batch), collator

        options = {"workers": workers, "prefetch": prefetch}
        make = aioloader_system.maker(MemoryDataset(samples), loader_parts, SEED, **options)
        loop = "uvloop" if uvloop else "asyncio"
        name = f"aioloader workers={workers} {loop}"
        note = f"DataLoader(workers={workers!r}, prefetch={prefetch!r}), async for, {loop}"
        super().__init__(make, uvloop, name=name, note=note)


# -- the hand-written loop: its own SplitMix64 and Feistel, plain numpy ------------------
_GOLDEN, _C1, _C2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_SALT, _ROUND, _M = 0xD1B54A32D192ED03, 0x632BE59BD9B4E019, (1 << 64) - 1


def _mix(x: int) -> int:
    z = (x + _GOLDEN) & _M
    z = ((z ^ (z >> 30)) * _C1) & _M
    z = ((z ^ (z >> 27)) * _C2) & _M
    return z ^ (z >> 31)


def _mix_np(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    z = x + np.uint64(_GOLDEN)
    z ^= z >> np.uint64(30)
    z *= np.uint64(_C1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(_C2)
    z ^= z >> np.uint64(31)
    return z


def _derive(seed: int, *values: int) -> int:
    """The key of ``(seed, epoch, step[, slot, stream])``: ``_mix`` chained over them."""
    h = _mix(seed ^ _SALT)
    for value in values:
        h = _mix((h + value) & _M)
    return h


def _feistel(positions: np.ndarray[Any, Any], n: int, key: int) -> np.ndarray[Any, Any]:
    half = ((n - 1).bit_length() + 1) // 2
    shift, mask = np.uint64(half), np.uint64((1 << half) - 1)
    keys = [np.uint64(key ^ ((r * _ROUND) & _M)) for r in range(4)]
    x = positions.astype(np.uint64)
    todo = np.arange(x.shape[0])
    while todo.size:
        left, right = x[todo] >> shift, x[todo] & mask
        for k in keys:
            left, right = right, left ^ (_mix_np(right ^ k) & mask)
        x[todo] = (left << shift) | right
        todo = todo[x[todo] >= np.uint64(n)]
    return x


class HandWritten(harness.Steps):
    group = "hand-written"
    name = "hand-written numpy loop (1 thread)"
    note = "plain numpy, own SplitMix64/Feistel, np.full + per-image multiply/add into the batch"

    def __init__(self, cfg: W1Config, samples: list[Any]) -> None:
        self.cfg = cfg
        self.images = [s.image for s in samples]
        self.targets = [np.asarray(s.target, np.int32) for s in samples]
        self.labels = [s.label for s in samples]

    def step(self, g: int) -> dict[str, np.ndarray[Any, Any]]:
        b, n, multiple = self.cfg.batch, self.cfg.images, self.cfg.multiple
        epoch, step = divmod(g, self.cfg.steps_per_epoch)
        positions = np.arange(step * b, step * b + b, dtype=np.uint64)
        order = _feistel(positions, n, _derive(SEED, epoch, 0, 0, RngStream.SHUFFLE)).tolist()
        images = [self.images[i] for i in order]
        widths = [im.shape[2] for im in images]
        wp = -(-max(widths) // multiple) * multiple
        c, h = images[0].shape[:2]
        # gain and offset: two normals per slot from derive(seed, e, s, slot, AUGMENT)
        prefix = np.uint64(_derive(SEED, epoch, step))
        lanes = _mix_np(np.arange(b, dtype=np.uint64) + prefix) + np.uint64(RngStream.AUGMENT)
        states = _mix_np(lanes)
        draws = np.arange(24, dtype=np.uint64) * np.uint64(_GOLDEN)
        singles = (_mix_np(states[None, :] + draws[:, None]) >> np.uint64(40)).astype(np.float32)
        singles *= np.float32(2.0**-24)
        normals = []
        for first in (0, 12):
            acc = singles[first].copy()
            for k in range(first + 1, first + 12):
                acc += singles[k]
            normals.append(acc - np.float32(6.0))
        gains = (np.float32(1.0) + np.float32(0.1) * normals[0]).tolist()
        offsets = (np.float32(0.1) * normals[1]).tolist()
        out = np.full((b, c, h, wp), np.float32(0.0), dtype=np.float32)
        for i, image in enumerate(images):
            view = out[i, :, :, : widths[i]]
            np.multiply(image, np.float32(gains[i]), out=view)
            np.add(view, np.float32(offsets[i]), out=view)
        targets = [self.targets[i] for i in order]
        return {
            "images": out,
            "widths": np.array(widths, np.int32),
            "targets": np.concatenate(targets).astype(np.int32, copy=False),
            "target_lengths": np.array([t.shape[0] for t in targets], np.int32),
            "labels": np.array([self.labels[i] for i in order], np.int32),
            "indices": np.array(order, np.int32),
        }


# -- the floors: nothing but copies, into batches of the same shapes -----------------------
def _step_images(cfg: W1Config, samples: list[Any], steps: int) -> list[list[Any]]:
    """The images of each of the first ``steps`` batches (found before timing)."""
    sampler = parts(cfg)[0]
    indices = [plan_batch(sampler, SEED, g).indices.tolist() for g in range(steps)]
    return [[samples[i].image for i in step] for step in indices]


class Floor(harness.Steps):
    """A floor: copies only, into batches of W1's shapes (not W1's values)."""

    group = "floor"
    exact = False


class CopyFloor(Floor):
    name = "memory-copy floor: np.copyto per image"
    note = "each sample's pixels copied into one preallocated [B, C, H, Wmax] batch"

    def __init__(self, cfg: W1Config, samples: list[Any]) -> None:
        self.multiple = cfg.multiple
        self.batches_of = _step_images(cfg, samples, 2 * cfg.steps_per_epoch)
        wide = -(-cfg.max_width // cfg.multiple) * cfg.multiple
        self.out = np.zeros((cfg.batch, *samples[0].image.shape[:2], wide), np.float32)

    def step(self, g: int) -> dict[str, np.ndarray[Any, Any]]:
        out, widest = self.out, 0
        for i, image in enumerate(self.batches_of[g % len(self.batches_of)]):
            w = image.shape[2]
            np.copyto(out[i, :, :, :w], image)
            widest = max(widest, w)
        return {"images": out[:, :, :, : -(-widest // self.multiple) * self.multiple]}


class BandwidthFloor(Floor):
    name = "memcpy reference: one np.copyto per batch"
    note = "a [B, C, H, Wp] block copied at once from a 2x-dataset-sized source ring"

    def __init__(self, cfg: W1Config, samples: list[Any]) -> None:
        c, h = samples[0].image.shape[:2]
        self.shapes = []
        for images in _step_images(cfg, samples, cfg.steps_per_epoch):
            widest = max(image.shape[2] for image in images)
            self.shapes.append((cfg.batch, c, h, -(-widest // cfg.multiple) * cfg.multiple))
        total = sum(s.image.size for s in samples)
        self.source = np.random.default_rng(1).random(2 * total, dtype=np.float32)
        self.out = np.empty(max(math.prod(s) for s in self.shapes), np.float32)
        self.offset = 0

    def step(self, g: int) -> dict[str, np.ndarray[Any, Any]]:
        shape = self.shapes[g % len(self.shapes)]
        size = math.prod(shape)
        if self.offset + size > self.source.size:
            self.offset = 0
        np.copyto(self.out[:size], self.source[self.offset : self.offset + size])
        self.offset += size
        return {"images": self.out[:size].reshape(shape)}


# -- the workload, as run.py crosses it -----------------------------------------------------
def rows(cfg: W1Config, samples: list[Any], log: Callable[[str], None]) -> list[Any]:
    """Every W1 row that can be built here (a missing package is logged and skipped)."""
    found: list[Any] = [Aioloader(cfg, samples, w, uv) for w in (0, 1, 2) for uv in (False, True)]
    found.append(Aioloader(cfg, samples, "auto", True))
    rebuild, dataset = functools.partial(make_samples, cfg), torch_system.Dataset(samples)

    def step(fields: tuple[str, ...] = ()) -> harness.StepBuilder:
        """``g -> batch``; a spawned worker rebuilds the samples."""
        parts_of = functools.partial(parts, cfg)
        return harness.StepBuilder(SEED, parts_of, samples, rebuild, None, fields)

    def torch_row(workers: int) -> torch_system.Torch:
        sampler, collator = parts(cfg)
        fields = FIELDS if workers else ()
        collate = torch_system.PlanCollate(collator, sampler, SEED, fields, shared=True)
        returns = "shared-memory tensors" if workers else "our ImageBatch"
        how = f"our sampler order and collator as collate_fn, returns {returns}"
        return torch_system.Torch(workers, how, dataset, sampler, SEED, collate)

    optional: list[tuple[str, Callable[[], list[Any]]]] = [
        ("torch", lambda: [torch_row(w) for w in (0, 1, 2)]),
        ("spdl", lambda: [spdl.Spdl(step(), t) for t in (1, 2)]),
        (
            "grain",
            lambda: [
                grain.Grain(step(), 2, cfg.prefetch),
                grain.Grain(step(FIELDS), processes=2, prefetch=2),
            ],
        ),
    ]
    found += harness.installed_rows("W1", optional, log)
    found += [HandWritten(cfg, samples), CopyFloor(cfg, samples), BandwidthFloor(cfg, samples)]
    return found


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W1's cases and notes (``quick``: 256 images, batch 32)."""
    cfg = W1Config(images=256, batch=32, warm=2, count=8, verify=9) if quick else W1Config()
    log("W1: building and checking every port")
    found = rows(cfg, make_samples(cfg), log)
    harness.verify("W1", found, cfg.verify, harness.fields(FIELDS), log)
    cases = [
        harness.port_case("W1", row, "batches/s", cfg.warm, cfg.count, isinstance(row, HandWritten))
        for row in found
    ]
    return cases, ([f"Quick run: {cfg}."] if quick else NOTES)


def targets(found: list[harness.Case]) -> list[dict[str, Any]]:
    """aioloader against torch, SPDL, the floors and the hand-written loop."""
    w1 = [c for c in found if c.workload == "W1"]
    if not w1:
        return []
    best = harness.best(w1, "W1", "aioloader")
    zero = harness.best(w1, "W1", "aioloader", "aioloader workers=0")
    two = harness.best(w1, "W1", "aioloader", "aioloader workers=2")
    floor = next((c for c in w1 if c.system.startswith("memory-copy floor")), None)
    memcpy = next((c for c in w1 if c.system.startswith("memcpy reference")), None)
    checks = [
        ("aioloader best >= 3x torch best", best, harness.best(w1, "W1", "torch"), 3),
        ("aioloader best >= 2x SPDL best", best, harness.best(w1, "W1", "spdl"), 2),
        ("aioloader best >= 0.5x memory-copy floor", best, floor, 0.5),
        ("aioloader workers=0 >= 1.0x hand-written loop", zero, harness.baseline_of(w1, "W1"), 1),
        ("aioloader workers=2 >= 1.7x workers=0", two, zero, 1.7),
        ("aioloader best >= 0.6x one np.copyto per batch", best, memcpy, 0.6),
    ]
    grid = [f"aioloader workers={w} {loop}" for w in (0, 1, 2) for loop in ("asyncio", "uvloop")]
    out = [harness.target(f"W1: {text}", mine, theirs, x) for text, mine, theirs, x in checks]
    return [*out, harness.auto_target(w1, "W1", "aioloader workers=auto uvloop", grid)]
