"""W1P: a transform that holds the GIL (pure-Python per-sample loop), for worker processes.

In-memory samples of 3,000 float64 values; ``gil_transform`` walks one in pure Python (rng
stream 0) to a float32 ``[16]``; stacked with the step and indices. docs/benchmarks.md (W1p)
gives each row.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import resource
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import harness
import numpy as np
from systems import aioloader as aioloader_system
from systems import grain
from systems import torch as torch_system

from aioloader import takes_plan, takes_rng
from aioloader.core import BatchPlan, SampleRng, ShuffledSampler
from aioloader.engine._build import build_batch
from aioloader.testing import MemoryDataset

NAME = "W1P"
TITLE = "a GIL-bound transform: pure-Python loop over 3,000 floats per sample, batch 32"
NOTES = [
    "Every row gives bit-identical batches (checked before timing). Batches/s over 60 "
    "batches after 4 untimed ones (process start-up, prefetch fill) per round; "
    "'first batch (s)' is from opening a stream to its first batch.",
]

SEED = 0
CHECKPOINTS = 16
TIMING = harness.Timing(warm=4, count=60, verify=5)  # warm: process start-up, prefetch fill


@dataclasses.dataclass(frozen=True)
class W1PConfig:
    timing: harness.Timing = TIMING
    samples: int = 2048
    length: int = 3000
    batch: int = 32
    prefetch: int = 8


def make_samples(cfg: W1PConfig) -> list[np.ndarray[Any, Any]]:
    return list(np.random.default_rng(SEED).standard_normal((cfg.samples, cfg.length)))


@takes_rng
def gil_transform(sample: np.ndarray[Any, Any], rng: SampleRng) -> np.ndarray[Any, Any]:
    """Pure Python over every value: holds the GIL for the whole sample."""
    values = sample.tolist()
    bias = float(rng.next_single()) - 0.5
    every = len(values) // CHECKPOINTS
    acc = 0.0
    out = []
    for k, x in enumerate(values):
        acc = 0.99 * acc + x + bias
        if acc > 4.0:
            acc = 4.0
        elif acc < -4.0:
            acc = -4.0
        if k % every == every - 1:
            out.append(acc)
    return np.array(out[:CHECKPOINTS], np.float32)


@takes_plan
def collate(samples: Sequence[np.ndarray[Any, Any]], plan: BatchPlan) -> dict[str, Any]:
    """Stack the features; the batch knows its step and indices."""
    indices = plan.indices.astype(np.int64)
    return {"features": np.stack(samples), "indices": indices, "global_step": plan.global_step}


@takes_plan
def build_step(samples: list[Any], plan: BatchPlan) -> dict[str, Any]:
    """The engine's own batch build (per-sample rngs, transform, collate)."""
    batch: dict[str, Any] = build_batch(plan, samples, gil_transform, collate)
    return batch


def parts(cfg: W1PConfig, collator: Any = build_step) -> tuple[ShuffledSampler, Any]:
    """A fresh sampler and the collator: ``build_step`` for a step builder."""
    return ShuffledSampler(cfg.samples, cfg.batch), collator


def step_builder(cfg: W1PConfig, samples: list[Any] | None) -> harness.StepBuilder:
    """``g -> batch``; a spawned worker rebuilds the samples from the seed."""
    rebuild = functools.partial(make_samples, cfg)
    return harness.StepBuilder(SEED, functools.partial(parts, cfg), samples, rebuild)


class Aioloader(aioloader_system.Aioloader):
    """``DataLoader(executor=thread|process)``; checked through ``iter_sync``, timed with
    ``async for`` on uvloop. Over a plain list (a sync dataset that pickles), the worker
    processes read the samples themselves and only plans go to them, as torch's workers
    index theirs."""

    def __init__(self, cfg: W1PConfig, dataset: Any, workers: int, executor: str, **options: Any):
        options.update(transform=gil_transform, workers=workers, executor=executor)
        loader_parts = functools.partial(parts, cfg, collate)
        make = aioloader_system.maker(dataset, loader_parts, SEED, prefetch=cfg.prefetch, **options)
        kind, listed = (
            "processes" if executor == "process" else "threads",
            isinstance(dataset, list),
        )
        name = f"aioloader {kind} workers={workers}"
        note = (
            f"DataLoader({type(dataset).__name__}, executor={executor!r}, workers={workers}, "
            f"prefetch={cfg.prefetch}), async for on asyncio with uvloop"
        )
        name += ", sync list read in the workers" if listed else ""
        super().__init__(make, sync=True, name=name, note=note)
        self.steps_per_epoch = cfg.samples // cfg.batch

    def first_batch_seconds(self) -> float:
        """From opening a stream to holding its first batch (process start-up included)."""
        started = time.perf_counter()
        with contextlib.closing(self.make().iter_sync(0, 1)) as batches:
            next(batches)
            return time.perf_counter() - started


class EpochsAioloader(Aioloader):
    """2 processes over 3 epochs of one loader: persistent workers against per-epoch ones."""

    epochs = 3

    def __init__(self, cfg: W1PConfig, samples: list[Any], persistent: bool) -> None:
        dataset = MemoryDataset(samples)
        super().__init__(cfg, dataset, 2, "process", persistent_workers=persistent)
        how = "persistent" if persistent else "per-epoch (persistent_workers=False)"
        self.name = f"aioloader processes workers=2, {self.epochs} epochs, {how}"
        self.note = (
            f"DataLoader(executor='process', workers=2, persistent_workers={persistent}); "
            f"a new loader per round, {self.epochs} epoch streams of count/{self.epochs} "
            "batches each, timed from the first stream's opening (start-up included)"
        )

    def measure(self, warm: int, count: int) -> float:
        per_epoch, steps = max(1, count // self.epochs), self.steps_per_epoch

        async def consume() -> float:
            loader = self.make()
            started = time.perf_counter()
            for epoch in range(self.epochs):
                async with loader.stream(epoch * steps, epoch * steps + per_epoch) as stream:
                    async for _ in stream:
                        pass
            ended = time.perf_counter()
            await loader.aclose()
            return per_epoch * self.epochs / (ended - started)

        return float(aioloader_system.run_async(consume))


# -- CPU per batch, read from /proc --------------------------------------------------------
def _cpu_now() -> tuple[float, float]:
    """CPU seconds of this process and of every live process below it."""
    children: dict[int, list[int]] = {}
    for entry in filter(lambda path: path.name.isdigit(), Path("/proc").iterdir()):
        with contextlib.suppress(OSError):
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    below, todo = [], [os.getpid()]
    while todo:
        found = children.get(todo.pop(), [])
        below += found
        todo += found
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, sum(map(harness.cpu_seconds, below))


def cpu_per_batch(port: harness.Port, warm: int, count: int) -> tuple[float, float]:
    """Steady-state CPU ms per batch (this process, the processes below it) over ``count``
    batches after ``warm``; unlike batches/s it does not depend on the machine's load."""
    marks = []
    # 32 more batches than measured: the workers are still alive at the last mark.
    with port.batches(warm + count + 32) as batches:
        for seen, _ in enumerate(batches, 1):
            if seen in (warm, warm + count):
                marks.append(_cpu_now())
    (own0, kids0), (own1, kids1) = marks
    return (own1 - own0) * 1e3 / count, (kids1 - kids0) * 1e3 / count


# -- the workload, as run.py crosses it -----------------------------------------------------
def rows(cfg: W1PConfig, samples: list[Any], log: Callable[[str], None]) -> list[Any]:
    """Every W1P row that can be built here (a missing package is logged and skipped)."""
    memory = MemoryDataset(samples)
    found: list[Any] = [
        Aioloader(cfg, memory, 0, "thread"),
        Aioloader(cfg, memory, 2, "thread"),
        Aioloader(cfg, memory, 2, "process"),
        Aioloader(cfg, list(samples), 2, "process"),
        EpochsAioloader(cfg, samples, persistent=True),
        EpochsAioloader(cfg, samples, persistent=False),
    ]
    sampler = ShuffledSampler(cfg.samples, cfg.batch)
    dataset = torch_system.Dataset(samples, gil_transform, (SEED, sampler.steps_per_epoch))
    collate_fn = torch_system.PlanCollate(collate, sampler, SEED)
    how = "transform in __getitem__, our sampler order, collate_fn stacks"
    torch_rows = [torch_system.Torch(w, how, dataset, sampler, SEED, collate_fn) for w in (0, 2)]
    optional: list[tuple[str, Callable[[], list[Any]]]] = [
        ("torch", lambda: torch_rows),
        ("grain", lambda: [grain.Grain(step_builder(cfg, samples), processes=2, prefetch=2)]),
    ]
    return found + harness.installed_rows("W1P", optional, log)


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W1P's cases and notes."""
    cfg = W1PConfig(timing=harness.Timing(warm=4, count=8, verify=2)) if quick else W1PConfig()
    log("W1P: building and checking every port")
    samples = make_samples(cfg)
    found = rows(cfg, samples, log)
    reference = step_builder(cfg, make_samples(cfg))
    arrays = harness.fields(("global_step", "indices", "features"))
    expected = [arrays(reference(g)) for g in range(cfg.timing.verify)]
    harness.verify("W1P", found, cfg.timing.verify, arrays, log, expected)
    cases = []
    for row in found:
        facts: dict[str, Any] = {}
        if isinstance(row, Aioloader) and not isinstance(row, EpochsAioloader):
            facts["first batch (s)"] = round(row.first_batch_seconds(), 3)
        if sys.platform == "linux":
            own, below = cpu_per_batch(row, 8, 80)
            facts["CPU ms/batch: main process + workers"] = f"{own:.2f} + {below:.2f}"
        baseline = row.name == "aioloader threads workers=0"
        cases.append(
            harness.port_case(
                "W1P", row, "batches/s", cfg.timing.warm, cfg.timing.count, baseline, facts
            )
        )
    return cases, NOTES + ([f"Quick run: {cfg}."] if quick else [])


def targets(cases: list[harness.Case]) -> list[dict[str, Any]]:
    """The issue's W1P targets, from one run."""
    mine = [c for c in cases if c.workload == "W1P"]
    by_name = {c.system: c for c in mine if c.values}
    zero = by_name.get("aioloader threads workers=0")
    torch2 = by_name.get("torch DataLoader num_workers=2")
    persistent = next((c for c in mine if c.system[-10:] == "persistent"), None)
    per_epoch = next((c for c in mine if "per-epoch" in c.system), None)
    text = "W1P: 3 epochs with persistent workers >= 1.0x per-epoch workers"
    out = [harness.target(text, persistent, per_epoch, 1.0)]
    for row_name, suffix in (
        ("", ""),
        (", sync list read in the workers", " (reads in the workers)"),
    ):
        row = by_name.get("aioloader processes workers=2" + row_name)
        name = f"W1P: 2 worker processes{suffix}"
        out.append(harness.target(f"{name} >= 1.7x workers=0", row, zero, 1.7))
        text = f"{name} >= 2x torch DataLoader(num_workers=2) (issue 21)"
        out.append(harness.target(text, row, torch2, 2.0))
    return out
