"""W4: resume at global step 10^9 of a shuffled epoch over 2^40 items.

docs/benchmarks.md (W4) says how each row is measured.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import gc
import itertools
import os
import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

import harness
import numpy as np
from harness import Case

from aioloader.core import ShuffledSampler, plan_batch

NAME = "W4"
TITLE = "resume at global step 10^9 of ShuffledSampler over 2^40 items (batch 128)"
NOTES = [
    "Ratios divide torch's naive resume (load and drop 10^9 batches) by each row. Rows "
    "marked extrapolated time a smaller skip and scale it linearly.",
]

SEED, BATCH, TARGET_STEP = 11, 128, 10**9
METRIC = "s to first batch at step 10^9"


@dataclasses.dataclass(frozen=True)
class W4Config:
    items: int = 2**40
    skip_items: int = 2**20  # torch's measured skip runs over this many items
    skip_batches: int = 2000  # batches dropped per skip measurement
    stateful_items: int = 2**22
    stateful_steps: int = 16384  # the step torchdata's resume is measured at
    rss_items: int = 2**24


@dataclasses.dataclass
class IndexDataset:
    """``n`` items; sample ``i`` is ``i`` itself (nothing to load)."""

    n: int

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index

    async def get_samples(self, indices: Sequence[int]) -> list[int]:
        return list(indices)


def aioloader_first_batch_seconds(items: int) -> float:
    """From a fresh loader + ``load_state_dict`` to the first batch (asyncio, workers=0)."""
    import anyio

    from aioloader import DataLoader

    def stack(samples: Sequence[int]) -> np.ndarray:
        return np.asarray(samples, dtype=np.int64)

    async def resume() -> float:
        started = time.perf_counter()
        loader = DataLoader(IndexDataset(items), ShuffledSampler(items, BATCH), stack, seed=SEED)
        loader.load_state_dict({"seed": SEED, "next_step": TARGET_STEP})
        async with loader.stream(TARGET_STEP, TARGET_STEP + 1) as batches:
            async for batch in batches:
                elapsed = time.perf_counter() - started
                if batch.shape != (BATCH,):
                    raise AssertionError(f"unexpected batch shape {batch.shape}")
        return elapsed

    return float(anyio.run(resume))


def sampler_memory(items: int) -> tuple[int, int]:
    """Bytes a ShuffledSampler holds, and the peak while planning step 10^9 (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        sampler = ShuffledSampler(items, BATCH)
        plan_batch(sampler, SEED, TARGET_STEP)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del sampler
    return held - before, peak - before


def torch_sampler_bytes_per_item(items: int) -> float:
    """RSS growth per item when torch's RandomSampler starts an epoch (randperm + list)."""
    import torch.utils.data

    def rss() -> int:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    gc.collect()
    before = rss()
    iterator = iter(torch.utils.data.RandomSampler(range(items)))
    next(iterator)
    grown = rss() - before
    del iterator
    gc.collect()
    return grown / items


def torch_loader(items: int, loader_class: Any = None) -> Any:
    """torch's ``DataLoader`` (or ``loader_class``) shuffling ``items``, batch 128, workers=0."""
    import torch.utils.data

    dataset: Any = IndexDataset(items)
    generator = torch.Generator().manual_seed(SEED)
    loader_class = loader_class or torch.utils.data.DataLoader
    return loader_class(dataset, batch_size=BATCH, shuffle=True, generator=generator)


def torch_skip_seconds(cfg: W4Config, load: bool) -> float:
    """torch's DataLoader skipping ``skip_batches`` (loading them, or islice over the batch
    sampler), the time extrapolated to 10^9 batches."""
    loader = torch_loader(cfg.skip_items)
    source = iter(loader) if load else iter(loader.batch_sampler)
    next(source)  # the epoch's randperm happens here, not in the timed part
    started = time.perf_counter()
    for _ in itertools.islice(source, cfg.skip_batches):
        pass
    return (time.perf_counter() - started) / cfg.skip_batches * TARGET_STEP


def stateful_resume(cfg: W4Config) -> Callable[[], float]:
    """torchdata's StatefulDataLoader: seconds from ``load_state_dict`` to the first batch at
    step 10^9, extrapolated from the resume at steps 0 and N (best of 2 each)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    make = functools.partial(torch_loader, cfg.stateful_items, StatefulDataLoader)
    states = {}
    for steps in (0, cfg.stateful_steps):
        loader = make()
        iterator = iter(loader)
        for _ in range(steps):
            next(iterator)
        states[steps] = loader.state_dict()

    def resume(steps: int) -> float:
        loader, state = make(), copy.deepcopy(states[steps])  # load_state_dict may consume it
        started = time.perf_counter()
        loader.load_state_dict(state)
        next(iter(loader))
        return time.perf_counter() - started

    def extrapolated() -> float:
        at_zero = min(resume(0) for _ in range(2))
        at_n = min(resume(cfg.stateful_steps) for _ in range(2))
        return at_zero + max(0.0, at_n - at_zero) / cfg.stateful_steps * TARGET_STEP

    return extrapolated


def cases(cfg: W4Config, log: Callable[[str], None]) -> tuple[list[Case], list[str]]:
    """The W4 rows (seconds to the first batch at step 10^9) and the memory notes."""
    sampler_memory(2**10)  # warm-up: lazy imports and caches are not the sampler's
    sizes = {"2^20": 2**20, "2^30": 2**30, "2^40": cfg.items}
    held, peak = zip(*(sampler_memory(n) for n in sizes.values()), strict=True)
    table = zip(sizes, held, peak, strict=True)
    notes = [
        "aioloader ShuffledSampler memory (tracemalloc), held / peak while planning step 10^9: "
        + ", ".join(f"{k} items: {h:,} / {p:,} B" for k, h, p in table)
    ]
    memory = ", ".join(f"{v:,} B" for v in held)
    if len(set(held)) == 1:
        memory = f"{held[-1]:,} B (same for 2^20, 2^30)"
    note = "ShuffledSampler(2^40, 128): keyed Feistel permutation, one 8,192-position span kept"
    measure = functools.partial(aioloader_first_batch_seconds, cfg.items)
    system = "aioloader: load_state_dict + first batch"
    out = [_row(system, measure, note, "measured at step 10^9", memory, group="aioloader")]
    try:
        import torch  # noqa: F401
    except ImportError:
        log("  W4: torch is not installed; its rows are left out")
        return out, notes
    per_item = torch_sampler_bytes_per_item(cfg.rss_items)
    tib = per_item * cfg.items / 2**40
    memory = f"{per_item:.1f} B/item: {tib:,.0f} TiB for 2^40 items"
    notes.append(
        f"torch RandomSampler, RSS when an epoch starts (randperm int64 + Python list, over "
        f"{cfg.rss_items:,} items): {memory}; it cannot run at that size. Skip rates are "
        f"measured over {cfg.skip_items:,} items and extrapolated to 10^9 batches."
    )
    note = f"{cfg.skip_batches} batches skipped per round, time x 10^9 / that"
    for load in (True, False):
        label = "loading and dropping batches" if load else "islice over the batch sampler"
        measure = functools.partial(torch_skip_seconds, cfg, load)
        how = "extrapolated from the skip rate"
        system = f"torch DataLoader skip: {label}"
        out.append(_row(system, measure, note, how, memory, baseline=load, group="torch"))
    try:
        measure = stateful_resume(cfg)
    except ImportError:
        log("  W4: torchdata is not installed; StatefulDataLoader is left out")
        return out, notes
    note = (
        f"resume measured at steps 0 and {cfg.stateful_steps} (best of 2) over "
        f"{cfg.stateful_items:,} items, extrapolated linearly to 10^9"
    )
    system = "torchdata StatefulDataLoader: load_state_dict + first batch"
    how = "extrapolated (linear in the step)"
    out.append(_row(system, measure, note, how, memory, group="torch"))
    return out, notes


def _row(system: str, measure: Any, note: str, how: str, memory: str, **extra: Any) -> Case:
    facts = {"how": how, "sampler memory": memory}
    return Case("W4", system, METRIC, measure, False, note=note, facts=facts, **extra)


QUICK = W4Config(
    skip_items=2**16, skip_batches=100, stateful_items=2**16, stateful_steps=64, rss_items=2**18
)


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    cfg = QUICK if quick else W4Config()
    log("W4: measuring sampler memory and building torch's resume paths")
    found, notes = cases(cfg, log)
    return found, notes + NOTES + ([f"Quick run: {cfg}."] if quick else [])


def targets(found: list[Case]) -> list[dict[str, Any]]:
    """The first batch at step 10^9, and the sampler's memory."""
    resume = next((c for c in found if c.workload == "W4" and c.group == "aioloader"), None)
    if resume is None or not resume.values:
        return []
    ms = harness.median(resume) * 1e3  # type: ignore[operator]
    memory = resume.facts.get("sampler memory", "")
    measured = f"{ms:.2f} ms (median; max {max(resume.values) * 1e3:.2f} ms)"
    return [
        harness.fact_target("W4: first batch at step 10^9 in < 10 ms", measured, ms < 10),
        harness.fact_target(
            "W4: sampler memory independent of dataset size", memory, "same for" in memory
        ),
    ]
