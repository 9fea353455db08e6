"""W1u: the user's own code through every loader: what the engine costs around it.

W1's images, shuffled; every row runs the user's plain-numpy ``transform`` per sample and
``collate`` per batch on the same order. docs/benchmarks.md (W1u) gives each row.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import harness
import numpy as np
from systems import aioloader as aioloader_system
from systems import grain, spdl
from systems import torch as torch_system

from aioloader import ShuffledSampler, takes_plan, takes_rng
from aioloader.core import RngStream, derive, keyed_permutation_array
from aioloader.datasets import line_images

NAME = "W1U"
TITLE = (
    "the user's own code: W1's images, the user's transform and collate function in "
    "plain numpy, every loader running them (batch 128)"
)
NOTES = [
    "Every row runs the same user functions on the same order and gives the plain loop's "
    "batches bit for bit (checked on 20 steps across an epoch boundary before timing). "
    "Ratios divide by the plain loop. aioloader rows consume with `async for` on uvloop, "
    "rows named iter_sync with `for batch in loader.iter_sync(...)` (loop on uvloop).",
]

SEED = 0
TIMING = harness.Timing(warm=16, count=256, verify=20)  # the check crosses an epoch boundary


@dataclasses.dataclass(frozen=True)
class W1uConfig:
    timing: harness.Timing = TIMING
    images: int = 2048  # 16 steps per epoch
    batch: int = 128
    prefetch: int = 8


# -- the user's own code ------------------------------------------------------------------
def transform(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The user's per-sample work."""
    return x * np.float32(1.5) + np.float32(0.25)


@takes_rng
def transform_with_rng(x: np.ndarray[Any, Any], rng: Any) -> np.ndarray[Any, Any]:
    """The same work with the rng signature: the loader derives a generator per sample."""
    return transform(x)


def collate(samples: Sequence[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    """The user's collate function: pad to a multiple of 4 and stack."""
    width = max(sample.shape[-1] for sample in samples)
    width += -width % 4
    channels, height = samples[0].shape[0], samples[0].shape[1]
    out = np.zeros((len(samples), channels, height, width), dtype=np.float32)
    for row, sample in enumerate(samples):
        out[row, :, :, : sample.shape[-1]] = sample
    return out


@takes_plan
def collate_with_plan(samples: Sequence[np.ndarray[Any, Any]], plan: Any) -> Any:
    return collate(samples)


def parts(cfg: W1uConfig) -> tuple[ShuffledSampler, Any]:
    return ShuffledSampler(cfg.images, cfg.batch), collate_with_plan


class AsyncImages:
    """The user's async dataset: ``get_sample`` returns at once (in memory)."""

    def __init__(self, images: list[np.ndarray[Any, Any]]) -> None:
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    async def get_sample(self, index: int) -> np.ndarray[Any, Any]:
        return self.images[index]


class PlainLoop(harness.Port):
    group = "baseline"
    name = "plain Python loop"
    note = "the epoch's order once per epoch, then collate([transform(data[i]) ...]) per step"

    def __init__(self, cfg: W1uConfig, images: list[np.ndarray[Any, Any]]) -> None:
        self.cfg, self.images = cfg, images

    @contextlib.contextmanager
    def batches(self, stop: int) -> Iterator[Iterator[Any]]:
        yield self._run(stop)

    def _run(self, stop: int) -> Iterator[Any]:
        n, batch, data = self.cfg.images, self.cfg.batch, self.images
        order: list[int] = []
        for g in range(stop):
            epoch, step = divmod(g, n // batch)
            if step == 0 or not order:
                key = derive(SEED, epoch, 0, 0, RngStream.SHUFFLE)
                order = keyed_permutation_array(np.arange(n, dtype=np.uint64), n, key).tolist()
            first = step * batch
            yield collate([transform(data[i]) for i in order[first : first + batch]])


# -- the rows -------------------------------------------------------------------------------
def aioloader_row(
    cfg: W1uConfig,
    images: list[Any],
    workers: int | str,
    kind: str,
    *,
    consumer: str = "async for",
    rng: bool = False,
    executor: str = "thread",
    named: bool = False,
) -> harness.Port:
    """aioloader over an async or a sync dataset on uvloop, checked through ``iter_sync`` and
    timed with ``async for`` (the stream's close included) or through ``iter_sync`` (a
    synchronous trainer). ``named`` rows say how they differ from the grid."""
    dataset: Any = AsyncImages(images) if kind == "async" else list(images)
    prefetch: int | str = "auto" if workers == "auto" else cfg.prefetch
    work = transform_with_rng if rng else transform
    options = {"transform": work, "workers": workers, "executor": executor, "prefetch": prefetch}
    how = "async get_sample" if kind == "async" else "sync list (in memory)"
    name = f"aioloader {how}, {'process workers' if executor == 'process' else 'workers'}={workers}"
    if named:
        name += f", {consumer}" + (", transform(x, rng)" if rng else "")
    note = (
        f"DataLoader({type(dataset).__name__}, ShuffledSampler, collate, "
        f"transform={work.__name__}, workers={workers!r}, executor={executor!r}, "
        f"prefetch={prefetch!r}); {consumer} on uvloop"
    )
    make = aioloader_system.maker(dataset, functools.partial(parts, cfg), SEED, **options)
    return aioloader_system.Aioloader(
        make, sync=True, close_timed=True, sync_timed=consumer == "iter_sync", name=name, note=note
    )


def step_builder(cfg: W1uConfig, images: list[Any]) -> harness.StepBuilder:
    """``g -> batch`` with the user's code, for SPDL and Grain."""
    return harness.StepBuilder(SEED, functools.partial(parts, cfg), images, None, transform)


def rows(cfg: W1uConfig, images: list[Any], log: Callable[[str], None]) -> list[Any]:
    """Every W1u row that can be built here (a missing package is logged and skipped)."""
    found: list[Any] = [PlainLoop(cfg, images)]
    found += [aioloader_row(cfg, images, w, kind) for kind in ("async", "sync") for w in (0, 1, 2)]
    found += [aioloader_row(cfg, images, "auto", kind) for kind in ("async", "sync")]
    found += [
        aioloader_row(cfg, images, 0, "async", rng=True, named=True),
        aioloader_row(cfg, images, 0, "async", consumer="iter_sync", named=True),
        aioloader_row(cfg, images, 0, "async", consumer="iter_sync", rng=True, named=True),
        aioloader_row(cfg, images, 2, "sync", executor="process"),
        aioloader_row(cfg, images, 2, "sync", consumer="iter_sync", executor="process", named=True),
    ]
    dataset, sampler = torch_system.Dataset(images, transform), parts(cfg)[0]
    how = "map-style dataset (transform in __getitem__), batch_sampler, collate_fn"
    torch_rows = [torch_system.Torch(w, how, dataset, sampler, SEED, collate) for w in (0, 1, 2)]
    optional: list[tuple[str, Callable[[], list[Any]]]] = [
        ("torch", lambda: torch_rows),
        ("spdl", lambda: [spdl.Spdl(step_builder(cfg, images), 1)]),
        ("grain", lambda: [grain.Grain(step_builder(cfg, images), threads=0, prefetch=0)]),
    ]
    return found + harness.installed_rows("W1u", optional, log)


# -- the workload, as run.py crosses it -----------------------------------------------------
def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W1u's cases and notes."""
    small = {"images": 512, "batch": 32, "timing": harness.Timing(warm=2, count=8, verify=9)}
    cfg = W1uConfig(**small) if quick else W1uConfig()
    log("W1u: building and checking every port")
    images = [sample.image for sample in line_images(cfg.images, seed=SEED)._samples]
    found = rows(cfg, images, log)
    harness.verify("W1U", found, cfg.timing.verify, lambda batch: {"batch": batch}, log)
    cases = [
        harness.port_case(
            "W1U", row, "batches/s", cfg.timing.warm, cfg.timing.count, row.group == "baseline"
        )
        for row in found
    ]
    return cases, NOTES


def targets(found: list[harness.Case]) -> list[dict[str, Any]]:
    """The async and sync datasets against the plain loop and torch."""
    named = {c.system: c for c in found if c.workload == "W1U"}
    if not named:
        return []
    plain = harness.baseline_of(found, "W1U")
    zero = "aioloader async get_sample, workers=0"
    async0, torch0 = named.get(zero), named.get("torch DataLoader num_workers=0")
    sync_best = harness.best(list(named.values()), "W1U", "aioloader", "aioloader sync")
    rng_async, rng_sync = (
        named.get(f"{zero}, {how}, transform(x, rng)") for how in ("async for", "iter_sync")
    )
    parallel = [
        c
        for c in named.values()
        if c.group == "aioloader" and c.values and re.search(r"workers=[12]\b", c.system)
    ]
    best_parallel = max(parallel, key=lambda c: harness.median(c) or 0.0) if parallel else None
    checks = [
        ("async dataset workers=0 >= 0.95x plain loop", async0, plain, 0.95),
        ("async dataset workers=0 >= 1.0x torch 0 workers", async0, torch0, 1),
        ("sync dataset best >= 0.95x plain loop", sync_best, plain, 0.95),
        ("iter_sync >= 0.95x async for", named.get(f"{zero}, iter_sync"), async0, 0.95),
        ("iter_sync >= 0.95x async for, transform(x, rng)", rng_sync, rng_async, 0.95),
        ("async for transform(x, rng) >= 0.9x plain", rng_async, plain, 0.9),
        ("best workers>0 setting >= 1.5x plain loop", best_parallel, plain, 1.5),
    ]
    out = [harness.target(f"W1u: {text}", mine, theirs, x) for text, mine, theirs, x in checks]
    for how in ("async get_sample", "sync list (in memory)"):
        picked = [f"aioloader {how}, workers={w}" for w in (0, 1, 2)]
        out.append(harness.auto_target(found, "W1U", f"aioloader {how}, workers=auto", picked))
    return out
