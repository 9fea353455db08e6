"""The engine's own cost: a trivial in-memory dataset and collator, batches per second."""

import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from aioloader import takes_plan
from aioloader.core import BatchPlan, ShuffledSampler
from aioloader.engine import DataLoader
from aioloader.testing import MemoryDataset

sys.path.insert(0, str(Path(__file__).parents[2]))  # run by path: the repo root, for benchmarks
from benchmarks.micro._common import BACKENDS, drain, options, spread


@takes_plan
def trivial_collator(samples: Sequence[int], plan: BatchPlan) -> int:
    """Does nothing but touch the batch: what is left is the engine."""
    return plan.global_step + len(samples)


if __name__ == "__main__":
    args = options(__doc__, steps=3000, rounds=5)
    rates: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds + 1):  # the first round warms up and is dropped
        for name, backend in BACKENDS.items():
            for workers in (0, 1, 2):
                dataset, sampler = MemoryDataset(list(range(4096))), ShuffledSampler(4096, 32)
                loader = DataLoader(
                    dataset, sampler, trivial_collator, seed=1, workers=workers, prefetch=8
                )
                seconds = anyio.run(drain, loader, args.steps, **backend)
                rates.setdefault((name, workers), []).append(args.steps / seconds)
    print("| backend | workers | batches/s (median) | min | max |\n|---|---|---|---|---|")
    for (name, workers), kept in rates.items():
        label = "asyncio+uvloop" if name == "uvloop" else name
        print(f"| {label} | {workers} | {spread(kept[1:], ',.0f')} |")
