"""W1P: a transform that holds the GIL (pure-Python per-sample loop), for worker processes.

2,048 in-memory samples of 3,000 float64 values; ``gil_transform`` walks them in pure Python
(rng stream 0) to a float32 ``[16]``; batch 32, stacked with the step and indices. Every
row gives the reference batches bit for bit (checked before timing). docs/benchmarks.md
(W1p) gives each row.
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
from harness import Case
from systems import aioloader as aioloader_system
from systems import grain
from systems import torch as torch_system

from aioloader.core import BatchPlan, SampleRng, ShuffledSampler, derive
from aioloader.engine._build import build_batch

SEED = 0
CHECKPOINTS = 16


@dataclasses.dataclass(frozen=True)
class W1PConfig:
    """Sizes of the workload and of one measurement."""

    samples: int = 2048
    length: int = 3000
    batch: int = 32
    prefetch: int = 8
    warm: int = 4  # batches consumed before the clock starts (process start-up, prefetch)
    count: int = 60  # batches timed per measurement
    verify: int = 5

    @property
    def steps_per_epoch(self) -> int:
        return self.samples // self.batch


def make_samples(cfg: W1PConfig) -> list[np.ndarray[Any, Any]]:
    """The dataset (deterministic from the config)."""
    matrix = np.random.default_rng(SEED).standard_normal((cfg.samples, cfg.length))
    return list(matrix)


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


def collate(samples: Sequence[np.ndarray[Any, Any]], plan: BatchPlan) -> dict[str, Any]:
    """Stack the features; the batch knows its step and indices."""
    return {
        "features": np.stack(samples),
        "indices": plan.indices.astype(np.int64),
        "global_step": plan.global_step,
    }


def build_step(samples: list[Any], plan: BatchPlan) -> dict[str, Any]:
    """The engine's own batch build (per-sample rngs, transform, collate)."""
    batch: dict[str, Any] = build_batch(plan, samples, gil_transform, collate)
    return batch


def parts(cfg: W1PConfig) -> tuple[ShuffledSampler, Any]:
    return ShuffledSampler(cfg.samples, cfg.batch), build_step


def step_builder(cfg: W1PConfig, samples: list[Any] | None) -> harness.StepBuilder:
    """``g -> batch``; a spawned worker rebuilds the samples from the seed."""
    rebuild = functools.partial(make_samples, cfg)
    return harness.StepBuilder(SEED, functools.partial(parts, cfg), samples, rebuild)


class Aioloader(aioloader_system.Aioloader):
    """``DataLoader(executor=thread|process)``; checked through ``iter_sync``, timed with
    ``async for`` on uvloop."""

    def __init__(
        self,
        cfg: W1PConfig,
        samples: list[Any],
        workers: int,
        executor: str,
        *,
        in_workers: bool = False,
        **options: Any,
    ) -> None:
        sampler = functools.partial(ShuffledSampler, cfg.samples, cfg.batch)
        options.update(transform=gil_transform, workers=workers, executor=executor)
        options["prefetch"] = cfg.prefetch
        make = aioloader_system.in_memory(samples, sampler, collate, SEED, **options)
        if in_workers:
            # A plain list (a sync dataset that pickles): the worker processes read the
            # samples themselves and only plans go to them, as torch's workers index theirs.
            from aioloader import DataLoader

            data = list(samples)

            def make() -> Any:
                return DataLoader(data, sampler(), collate, seed=SEED, **options)

        super().__init__(make, uvloop=True, sync=True)
        self.cfg = cfg
        kind = "processes" if executor == "process" else "threads"
        self.name = f"aioloader {kind} workers={workers}"
        if in_workers:
            self.name += ", sync list read in the workers"
        self.note = (
            f"DataLoader({'list' if in_workers else 'MemoryDataset'}, executor={executor!r}, "
            f"workers={workers}, prefetch={cfg.prefetch}), async for on asyncio with uvloop"
        )

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
        super().__init__(cfg, samples, 2, "process", persistent_workers=persistent)
        how = "persistent" if persistent else "per-epoch (persistent_workers=False)"
        self.name = f"aioloader processes workers=2, {self.epochs} epochs, {how}"
        self.note = (
            f"DataLoader(executor='process', workers=2, persistent_workers={persistent}); "
            f"a new loader per round, {self.epochs} epoch streams of count/{self.epochs} "
            "batches each, timed from the first stream's opening (start-up included)"
        )
        self.later_first_batch: list[float] = []

    def measure(self, warm: int, count: int) -> float:
        per_epoch = max(1, count // self.epochs)
        steps = self.cfg.steps_per_epoch

        async def consume() -> float:
            loader = self.make()
            started = time.perf_counter()
            for epoch in range(self.epochs):
                opened = time.perf_counter()
                first = True
                async with loader.stream(epoch * steps, epoch * steps + per_epoch) as stream:
                    async for _ in stream:
                        if first and epoch > 0:
                            self.later_first_batch.append(time.perf_counter() - opened)
                        first = False
            ended = time.perf_counter()
            await loader.aclose()
            return per_epoch * self.epochs / (ended - started)

        return float(aioloader_system.run_async(consume))


def _descendants() -> list[int]:
    """Pids of every live process below this one."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found, todo = [], [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _cpu_now() -> tuple[float, float]:
    """CPU seconds of this process and of every live process below it."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, sum(map(harness.cpu_seconds, _descendants()))


class TorchDataset:
    """Map-style; the key ``(g, slot, index)`` carries what the transform's rng needs."""

    def __init__(self, cfg: W1PConfig, samples: list[Any]) -> None:
        self.cfg, self.samples = cfg, samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: tuple[int, int, int]) -> tuple[tuple[int, int, int], Any]:
        g, slot, index = key
        epoch, step = divmod(g, self.cfg.steps_per_epoch)
        rng = SampleRng(derive(SEED, epoch, step, slot, 0))
        return key, gil_transform(self.samples[index], rng)


def torch_collate(items: list[tuple[tuple[int, int, int], Any]]) -> dict[str, Any]:
    """Stack the transformed samples (numpy: a 2 KiB batch, pickled back by torch)."""
    return {
        "features": np.stack([sample for _, sample in items]),
        "indices": np.array([key[2] for key, _ in items], np.int64),
        "global_step": items[0][0][0],
    }


def torch_parts(cfg: W1PConfig, samples: list[Any], workers: int, stop: int) -> Any:
    """torch: the transform in ``__getitem__``, our order, a stacking collate_fn."""
    sampler = ShuffledSampler(cfg.samples, cfg.batch)
    order = torch_system.StepSampler(sampler, SEED, stop, key="slot")
    return TorchDataset(cfg, samples), order, torch_collate


def cpu_per_batch(port: harness.Port, warm: int, count: int) -> tuple[float, float]:
    """Steady-state CPU ms per batch: (this process, the processes below it).

    Read from /proc over ``count`` batches after ``warm``; unlike batches/s it does not
    depend on how loaded the machine is.
    """
    marks = []
    # 32 more batches than measured: the workers are still alive at the last mark.
    with port.batches(warm + count + 32) as batches:
        for seen, _ in enumerate(batches, 1):
            if seen in (warm, warm + count):
                marks.append(_cpu_now())
    (own0, kids0), (own1, kids1) = marks
    return (own1 - own0) * 1e3 / count, (kids1 - kids0) * 1e3 / count


def systems(cfg: W1PConfig, samples: list[Any], log: Callable[[str], None]) -> list[Any]:
    """Every W1P port that can be built here (a missing package is logged and skipped)."""
    found: list[harness.Port] = [
        Aioloader(cfg, samples, 0, "thread"),
        Aioloader(cfg, samples, 2, "thread"),
        Aioloader(cfg, samples, 2, "process"),
        Aioloader(cfg, samples, 2, "process", in_workers=True),
        EpochsAioloader(cfg, samples, persistent=True),
        EpochsAioloader(cfg, samples, persistent=False),
    ]
    how = "transform in __getitem__, our sampler order, collate_fn stacks"
    torch_parts_of = functools.partial(torch_parts, cfg, samples)
    optional: list[tuple[str, Callable[[], list[Any]]]] = [
        ("torch", lambda: torch_system.rows((0, 2), torch_parts_of, how)),
        ("grain", lambda: [grain.Grain(step_builder(cfg, samples), processes=2, prefetch=2)]),
    ]
    found += harness.installed_rows("W1P", optional, log)
    return found


def cases(cfg: W1PConfig, log: Callable[[str], None]) -> list[Case]:
    """Build, verify and wrap every W1P port as a ``Case`` (batches/s)."""
    samples = make_samples(cfg)
    found = systems(cfg, samples, log)
    reference = step_builder(cfg, make_samples(cfg))
    arrays = harness.fields(("global_step", "indices", "features"))
    expected = [arrays(reference(g)) for g in range(cfg.verify)]
    harness.verify("W1P", found, cfg.verify, arrays, log, expected)
    out = []
    for system in found:
        facts: dict[str, Any] = {}
        if isinstance(system, Aioloader) and not isinstance(system, EpochsAioloader):
            facts["first batch (s)"] = round(system.first_batch_seconds(), 3)
        if sys.platform == "linux":
            own, below = cpu_per_batch(system, 8, 80)
            facts["CPU ms/batch: main process + workers"] = f"{own:.2f} + {below:.2f}"
        baseline = system.name == "aioloader threads workers=0"
        out.append(
            harness.port_case("W1P", system, "batches/s", cfg.warm, cfg.count, baseline, facts)
        )
    return out


def targets(cases: list[Case]) -> list[dict[str, Any]]:
    """The issue's W1P targets, from one run."""
    by_name = {c.system: c for c in cases if c.workload == "W1P" and c.values}
    processes = by_name.get("aioloader processes workers=2")
    persistent = next(
        (c for c in cases if c.workload == "W1P" and c.system[-10:] == "persistent"), None
    )
    per_epoch = next((c for c in cases if c.workload == "W1P" and "per-epoch" in c.system), None)
    in_workers = by_name.get("aioloader processes workers=2, sync list read in the workers")
    out = [
        harness.target(
            "W1P: 3 epochs with persistent workers >= 1.0x per-epoch workers",
            persistent,
            per_epoch,
            1.0,
        ),
    ]
    for row in (processes, in_workers):
        name = "2 worker processes" + (" (reads in the workers)" if row is in_workers else "")
        out += [
            harness.target(
                f"W1P: {name} >= 1.7x workers=0",
                row,
                by_name.get("aioloader threads workers=0"),
                1.7,
            ),
            harness.target(
                f"W1P: {name} >= 2x torch DataLoader(num_workers=2) (issue 21)",
                row,
                by_name.get("torch DataLoader num_workers=2"),
                2.0,
            ),
        ]
    return out


# -- the workload, as run.py crosses it -----------------------------------------------------
NAME = "W1P"
TITLE = "a GIL-bound transform: pure-Python loop over 3,000 floats per sample, batch 32"
NOTES = [
    "Every row gives bit-identical batches (checked before timing). Batches/s over 60 "
    "batches after 4 untimed ones (process start-up, prefetch fill) per round; "
    "'first batch (s)' is from opening a stream to its first batch.",
]


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W1P's cases and notes."""
    cfg = W1PConfig(count=8, verify=2) if quick else W1PConfig()
    log("W1P: building and checking every port")
    return cases(cfg, log), NOTES + ([f"Quick run: {cfg}."] if quick else [])
