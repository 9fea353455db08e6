"""The engine's own cost: a trivial in-memory dataset and collator, batches per second.

Run: .venv/bin/python benchmarks/micro/bench_engine.py [--steps 3000] [--rounds 5]
docs/benchmarks.md (micro-benchmarks) says what it measures.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

import anyio

from aioloader.core import BatchPlan, ShuffledSampler
from aioloader.engine import DataLoader
from aioloader.testing import MemoryDataset


def trivial_collator(samples: Sequence[int], plan: BatchPlan) -> int:
    """Does nothing but touch the batch: what is left is the engine."""
    return plan.global_step + len(samples)


def run_once(workers: int, backend: str, options: dict[str, Any], steps: int) -> float:
    loader = DataLoader(
        MemoryDataset(list(range(4096))),
        ShuffledSampler(4096, 32),
        trivial_collator,
        seed=1,
        workers=workers,
        prefetch=8,
    )

    async def consume() -> float:
        started = time.perf_counter()
        async with loader.stream(0, steps) as batches:
            async for _ in batches:
                pass
        return steps / (time.perf_counter() - started)

    return anyio.run(consume, backend=backend, backend_options=options)


CONFIGS = [
    ("asyncio", {"use_uvloop": False}),
    ("asyncio+uvloop", {"use_uvloop": True}),
    ("trio", {}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds + 1):  # the first round warms up and is dropped
        for name, options in CONFIGS:
            backend = name.split("+")[0]
            for workers in (0, 1, 2):
                rate = run_once(workers, backend, options, args.steps)
                results.setdefault((name, workers), []).append(rate)
    print("| backend | workers | batches/s (median) | min | max |")
    print("|---|---|---|---|---|")
    for (name, workers), rates in results.items():
        kept = rates[1:]
        print(
            f"| {name} | {workers} | {statistics.median(kept):,.0f} | "
            f"{min(kept):,.0f} | {max(kept):,.0f} |"
        )


if __name__ == "__main__":
    main()
