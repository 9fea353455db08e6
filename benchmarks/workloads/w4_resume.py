"""W4: resume at global step 10^9 of a shuffled epoch over 2^40 items.

aioloader's ``load_state_dict`` + first batch, against torch's skip (measured on fewer
items, extrapolated) and torchdata's ``StatefulDataLoader``; and the sampler's memory.
docs/benchmarks.md (W4) says how each row is measured.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import itertools
import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

import harness
import numpy as np
from harness import Case

from aioloader.core import ShuffledSampler, plan_batch

SEED = 11
BATCH = 128
TARGET_STEP = 10**9


@dataclasses.dataclass(frozen=True)
class W4Config:
    items: int = 2**40
    skip_items: int = 2**20  # torch's measured skip runs over this many items
    skip_batches: int = 2000  # batches dropped per skip measurement
    stateful_items: int = 2**22
    stateful_steps: int = 16384  # the step torchdata's resume is measured at
    rss_items: int = 2**24


class IndexDataset:
    """``len`` items; sample ``i`` is ``i`` itself (nothing to load)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index

    async def get_samples(self, indices: Sequence[int]) -> list[int]:
        return list(indices)


def stack(samples: Sequence[int], plan: Any) -> np.ndarray[Any, Any]:
    return np.asarray(samples, dtype=np.int64)


def aioloader_first_batch_ms(items: int) -> float:
    """Milliseconds from a fresh loader + ``load_state_dict`` to the first batch."""
    import anyio

    from aioloader import DataLoader

    async def resume() -> float:
        started = time.perf_counter()
        loader = DataLoader(IndexDataset(items), ShuffledSampler(items, BATCH), stack, seed=SEED)
        loader.load_state_dict({"seed": SEED, "next_step": TARGET_STEP})
        async with loader.stream(TARGET_STEP, TARGET_STEP + 1) as batches:
            async for batch in batches:
                elapsed = time.perf_counter() - started
                if batch.shape != (BATCH,):
                    raise AssertionError(f"unexpected batch shape {batch.shape}")
        return elapsed * 1e3

    return float(anyio.run(resume))


def sampler_memory(items: int) -> dict[str, int]:
    """Bytes a ShuffledSampler keeps, and the peak while planning step 10^9 (tracemalloc)."""
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
    return {"held": held - before, "peak": peak - before}


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as handle:
        import os

        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def torch_sampler_bytes_per_item(items: int) -> float:
    """RSS growth per item when torch's RandomSampler starts an epoch (randperm + list)."""
    import torch.utils.data

    gc.collect()
    before = _rss()
    iterator = iter(torch.utils.data.RandomSampler(range(items)))
    next(iterator)
    grown = _rss() - before
    del iterator
    gc.collect()
    return grown / items


def torch_skip_rate(items: int, batches: int, load: bool) -> float:
    """Batches per second dropped by torch's DataLoader while fast-forwarding."""
    import torch
    import torch.utils.data

    generator = torch.Generator().manual_seed(SEED)
    loader = torch.utils.data.DataLoader(
        IndexDataset(items),  # type: ignore[arg-type]
        batch_size=BATCH,
        shuffle=True,
        generator=generator,
        num_workers=0,
    )
    source = iter(loader) if load else iter(loader.batch_sampler)  # type: ignore[arg-type]
    next(source)  # the epoch's randperm happens here, not in the timed part
    started = time.perf_counter()
    for _ in itertools.islice(source, batches):
        pass
    return batches / (time.perf_counter() - started)


class StatefulResume:
    """torchdata's StatefulDataLoader: time from ``load_state_dict`` to the first batch."""

    def __init__(self, cfg: W4Config) -> None:
        import torch
        from torchdata.stateful_dataloader import StatefulDataLoader

        self.cfg = cfg
        self.make = lambda: StatefulDataLoader(
            IndexDataset(cfg.stateful_items),  # type: ignore[arg-type]
            batch_size=BATCH,
            shuffle=True,
            generator=torch.Generator().manual_seed(SEED),
            num_workers=0,
        )
        self.states = {}
        for steps in (0, cfg.stateful_steps):
            loader = self.make()
            iterator = iter(loader)
            for _ in range(steps):
                next(iterator)
            self.states[steps] = loader.state_dict()

    def resume_seconds(self, steps: int) -> float:
        loader = self.make()
        state = copy.deepcopy(self.states[steps])  # load_state_dict may consume its argument
        started = time.perf_counter()
        loader.load_state_dict(state)
        next(iter(loader))
        return time.perf_counter() - started

    def extrapolated_seconds(self) -> float:
        """Seconds to resume at step 10^9, from the slope between steps 0 and N (best of 2)."""
        steps = self.cfg.stateful_steps
        at_zero = min(self.resume_seconds(0) for _ in range(2))
        at_n = min(self.resume_seconds(steps) for _ in range(2))
        per_step = max(0.0, at_n - at_zero) / steps
        return at_zero + per_step * TARGET_STEP


def cases(cfg: W4Config, log: Callable[[str], None]) -> tuple[list[Case], list[str]]:
    """The W4 rows (time to the first batch at step 10^9, in seconds) and notes."""
    sampler_memory(2**10)  # warm-up: lazy imports and caches are not the sampler's
    memory = {label: sampler_memory(n) for label, n in (("2^20", 2**20), ("2^30", 2**30))}
    memory["2^40"] = sampler_memory(cfg.items)
    held = {label: m["held"] for label, m in memory.items()}
    peak = {label: m["peak"] for label, m in memory.items()}
    notes = [
        "aioloader ShuffledSampler memory (tracemalloc): held "
        + ", ".join(f"{k} items: {v:,} B" for k, v in held.items())
        + "; peak while planning step 10^9: "
        + ", ".join(f"{k}: {v:,} B" for k, v in peak.items())
        + "."
    ]
    out = [
        Case(
            workload="W4",
            system="aioloader: load_state_dict + first batch",
            metric="s to first batch at step 10^9",
            measure=lambda: aioloader_first_batch_ms(cfg.items) / 1e3,
            higher_is_better=False,
            group="aioloader",
            note="ShuffledSampler(2^40, 128): keyed Feistel permutation, no table",
            facts={
                "how": "measured at step 10^9",
                "sampler memory": f"{held['2^40']:,} B (same for 2^20, 2^30)"
                if len(set(held.values())) == 1
                else ", ".join(f"{v:,} B" for v in held.values()),
            },
        )
    ]
    try:
        import torch  # noqa: F401
    except ImportError:
        log("  W4: torch is not installed; its rows are left out")
        return out, notes
    per_item = torch_sampler_bytes_per_item(cfg.rss_items)
    need = per_item * cfg.items
    torch_memory = f"{per_item:.1f} B/item: {need / 2**40:,.0f} TiB for 2^40 items"
    notes.append(
        f"torch RandomSampler: {per_item:.1f} bytes per item of RSS when an epoch starts "
        f"(randperm int64 + Python list; measured over {cfg.rss_items:,} items), so "
        f"{need / 2**40:,.0f} TiB for 2^40 items: it cannot run at that size. Skip rates are "
        f"measured over {cfg.skip_items:,} items and extrapolated to 10^9 batches."
    )
    for load in (True, False):
        label = "loading and dropping batches" if load else "islice over the batch sampler"
        out.append(
            Case(
                workload="W4",
                system=f"torch DataLoader skip: {label}",
                metric="s to first batch at step 10^9",
                measure=_skip(cfg, load),
                higher_is_better=False,
                baseline=load,
                group="torch",
                note=f"{cfg.skip_batches} batches skipped per round, time x 10^9 / that",
                facts={"how": "extrapolated from the skip rate", "sampler memory": torch_memory},
            )
        )
    try:
        stateful = StatefulResume(cfg)
    except ImportError:
        log("  W4: torchdata is not installed; StatefulDataLoader is left out")
        return out, notes
    out.append(
        Case(
            workload="W4",
            system="torchdata StatefulDataLoader: load_state_dict + first batch",
            metric="s to first batch at step 10^9",
            measure=stateful.extrapolated_seconds,
            higher_is_better=False,
            group="torch",
            note=(
                f"resume measured at steps 0 and {cfg.stateful_steps} (best of 2) over "
                f"{cfg.stateful_items:,} items, extrapolated linearly to 10^9"
            ),
            facts={"how": "extrapolated (linear in the step)", "sampler memory": torch_memory},
        )
    )
    return out, notes


def _skip(cfg: W4Config, load: bool) -> Callable[[], float]:
    return lambda: TARGET_STEP / torch_skip_rate(cfg.skip_items, cfg.skip_batches, load)


# -- the workload, as run.py crosses it -----------------------------------------------------
NAME = "W4"
TITLE = "resume at global step 10^9 of ShuffledSampler over 2^40 items (batch 128)"
NOTES = [
    "Ratios divide torch's naive resume (load and drop 10^9 batches) by each row. Rows "
    "marked extrapolated time a smaller skip and scale it linearly.",
]


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W4's cases and notes (the sampler memory first)."""
    cfg = (
        W4Config(
            skip_items=2**16,
            skip_batches=100,
            stateful_items=2**16,
            stateful_steps=64,
            rss_items=2**18,
        )
        if quick
        else W4Config()
    )
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
    return [
        harness.fact_target(
            "W4: first batch at step 10^9 in < 10 ms",
            f"{ms:.2f} ms (median; max {max(resume.values) * 1e3:.2f} ms)",
            ms < 10,
        ),
        harness.fact_target(
            "W4: sampler memory independent of dataset size", memory, "same for" in memory
        ),
    ]
