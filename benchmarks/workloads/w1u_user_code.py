"""W1u: the user's own code through every loader: what the engine costs around it.

W1's images, batch 128, shuffled; every row runs the user's plain-numpy ``transform`` per
sample and ``collate`` per batch on the same order, and gives the plain loop's batches bit
for bit (checked before timing). docs/benchmarks.md (W1u) gives each row.
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
from harness import Case
from systems import aioloader as aioloader_system
from systems import grain, spdl
from systems import torch as torch_system

from aioloader import DataLoader, ShuffledSampler
from aioloader.core import BatchPlan, keyed_permutation_array
from aioloader.datasets import line_images

SEED = 0


@dataclasses.dataclass(frozen=True)
class W1uConfig:
    images: int = 2048
    batch: int = 128
    prefetch: int = 8
    warm: int = 16
    count: int = 256
    verify: int = 20  # crosses an epoch boundary (16 steps per epoch)

    @property
    def steps_per_epoch(self) -> int:
        return self.images // self.batch


# -- the user's own code ------------------------------------------------------------------
def transform(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The user's per-sample work."""
    return x * np.float32(1.5) + np.float32(0.25)


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


def collate_with_plan(samples: Sequence[np.ndarray[Any, Any]], plan: BatchPlan) -> Any:
    return collate(samples)


class AsyncImages:
    """The user's async dataset: ``get_sample`` returns at once (in memory)."""

    def __init__(self, images: list[np.ndarray[Any, Any]]) -> None:
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    async def get_sample(self, index: int) -> np.ndarray[Any, Any]:
        return self.images[index]


def make_images(cfg: W1uConfig) -> list[np.ndarray[Any, Any]]:
    dataset = line_images(cfg.images, seed=SEED)
    return [sample.image for sample in dataset._samples]


def sampler(cfg: W1uConfig) -> ShuffledSampler:
    return ShuffledSampler(cfg.images, cfg.batch)


# -- the systems -------------------------------------------------------------------------
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
        from aioloader.core import RngStream, derive

        cfg, data = self.cfg, self.images
        steps = cfg.steps_per_epoch
        order: list[int] = []
        for g in range(stop):
            epoch, step = divmod(g, steps)
            if step == 0 or not order:
                key = derive(SEED, epoch, 0, 0, RngStream.SHUFFLE)
                order = keyed_permutation_array(
                    np.arange(cfg.images, dtype=np.uint64), cfg.images, key
                ).tolist()
            first = step * cfg.batch
            yield collate([transform(data[i]) for i in order[first : first + cfg.batch]])


def aioloader_row(
    cfg: W1uConfig,
    images: list[np.ndarray[Any, Any]],
    workers: int | str,
    kind: str,
    *,
    consumer: str = "async for",
    rng: bool = False,
    executor: str = "thread",
    named: bool = False,
) -> harness.Port:
    """aioloader over an async or a sync dataset, checked through ``iter_sync`` and timed
    with ``async for`` in one loop (the stream's close included) or through ``iter_sync``
    (a synchronous trainer); on uvloop. ``named`` rows say how they differ from the grid."""
    dataset: Any = AsyncImages(images) if kind == "async" else list(images)
    prefetch: int | str = "auto" if workers == "auto" else cfg.prefetch

    def make() -> Any:
        return DataLoader(
            dataset,
            sampler(cfg),
            collate_with_plan,
            seed=SEED,
            transform=transform_with_rng if rng else transform,
            workers=workers,
            executor=executor,
            prefetch=prefetch,
        )

    row = aioloader_system.Aioloader(make, uvloop=True, sync=True)
    row.close_timed = True
    row.sync_timed = consumer == "iter_sync"
    how = "async get_sample" if kind == "async" else "sync list (in memory)"
    pool = "process workers" if executor == "process" else "workers"
    row.name = f"aioloader {how}, {pool}={workers}"
    if named:
        row.name += f", {consumer}" + (", transform(x, rng)" if rng else "")
    row.note = (
        f"DataLoader({'AsyncImages' if kind == 'async' else 'list'}, ShuffledSampler, "
        f"collate, transform={'transform_with_rng' if rng else 'transform'}, "
        f"workers={workers!r}, executor={executor!r}, prefetch={prefetch!r}); "
        f"{consumer} on uvloop"
    )
    return row


def torch_parts(cfg: W1uConfig, images: list[Any], workers: int, stop: int) -> Any:
    """torch: a map-style dataset (the transform in ``__getitem__``), our order, collate_fn."""
    order = torch_system.StepSampler(sampler(cfg), SEED, stop, key="index")
    return torch_system.KeyedDataset(images, transform), order, collate


def step_function(cfg: W1uConfig, images: list[Any]) -> harness.StepBuilder:
    """``g -> batch`` with the user's code, for SPDL and Grain."""
    return harness.StepBuilder(
        SEED, lambda: (sampler(cfg), collate_with_plan), images, None, transform
    )


# -- verification and cases ----------------------------------------------------------------
def systems(cfg: W1uConfig, images: list[Any], log: Callable[[str], None]) -> list[Any]:
    found: list[harness.Port] = [PlainLoop(cfg, images)]
    found += [aioloader_row(cfg, images, w, "async") for w in (0, 1, 2)]
    found += [aioloader_row(cfg, images, w, "sync") for w in (0, 1, 2)]
    found += [aioloader_row(cfg, images, "auto", kind) for kind in ("async", "sync")]
    found += [
        aioloader_row(cfg, images, 0, "async", rng=True, named=True),
        aioloader_row(cfg, images, 0, "async", consumer="iter_sync", named=True),
        aioloader_row(cfg, images, 0, "async", consumer="iter_sync", rng=True, named=True),
        aioloader_row(cfg, images, 2, "sync", executor="process"),
        aioloader_row(cfg, images, 2, "sync", consumer="iter_sync", executor="process", named=True),
    ]
    how = "map-style dataset (transform in __getitem__), batch_sampler, collate_fn"
    torch_parts_of = functools.partial(torch_parts, cfg, images)
    optional: list[tuple[str, Callable[[], list[Any]]]] = [
        ("torch", lambda: torch_system.rows((0, 1, 2), torch_parts_of, how)),
        ("spdl", lambda: [spdl.Spdl(step_function(cfg, images), 1)]),
        ("grain", lambda: [grain.Grain(step_function(cfg, images), threads=0, prefetch=0)]),
    ]
    found += harness.installed_rows("W1u", optional, log)
    return found


def cases(cfg: W1uConfig, log: Callable[[str], None]) -> list[Case]:
    images = make_images(cfg)
    found = systems(cfg, images, log)
    harness.verify("W1U", found, cfg.verify, lambda batch: {"batch": batch}, log)
    return [
        harness.port_case(
            "W1U", system, "batches/s", cfg.warm, cfg.count, isinstance(system, PlainLoop)
        )
        for system in found
    ]


# -- the workload, as run.py crosses it -----------------------------------------------------
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


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W1u's cases and notes."""
    cfg = W1uConfig(images=512, batch=32, warm=2, count=8, verify=9) if quick else W1uConfig()
    log("W1u: building and checking every port")
    return cases(cfg, log), NOTES


def targets(found: list[Case]) -> list[dict[str, Any]]:
    """The W1u targets: the async and sync datasets against the plain loop and torch."""
    w1u = [c for c in found if c.workload == "W1U"]
    if not w1u:
        return []
    plain = harness.baseline_of(found, "W1U")
    async0 = next((c for c in w1u if c.system == "aioloader async get_sample, workers=0"), None)
    torch0 = next((c for c in w1u if c.system == "torch DataLoader num_workers=0"), None)
    sync_best = harness.best(w1u, "W1U", "aioloader", "aioloader sync")
    out = [
        harness.target("W1u: async dataset workers=0 >= 0.95x plain loop", async0, plain, 0.95),
        harness.target("W1u: async dataset workers=0 >= 1.0x torch 0 workers", async0, torch0, 1),
        harness.target("W1u: sync dataset best >= 0.95x plain loop", sync_best, plain, 0.95),
    ]
    named = {c.system: c for c in w1u}
    zero = "aioloader async get_sample, workers=0"
    for suffix in ("", ", transform(x, rng)"):
        sync_row = named.get(f"{zero}, iter_sync{suffix}")
        async_row = named.get(f"{zero}, async for{suffix}" if suffix else zero)
        text = f"W1u: iter_sync >= 0.95x async for{suffix}"
        out.append(harness.target(text, sync_row, async_row, 0.95))
    rng_row = named.get(f"{zero}, async for, transform(x, rng)")
    out.append(
        harness.target("W1u: async for transform(x, rng) >= 0.9x plain", rng_row, plain, 0.9)
    )
    parallel = [
        c
        for c in w1u
        if c.group == "aioloader" and c.values and re.search(r"workers=[12]\b", c.system)
    ]
    best_parallel = max(parallel, key=lambda c: harness.median(c) or 0.0) if parallel else None
    out.append(
        harness.target("W1u: best workers>0 setting >= 1.5x plain loop", best_parallel, plain, 1.5)
    )
    for how in ("async get_sample", "sync list (in memory)"):
        picked = [f"aioloader {how}, workers={w}" for w in (0, 1, 2)]
        out.append(harness.auto_target(w1u, "W1U", f"aioloader {how}, workers=auto", picked))
    return out
