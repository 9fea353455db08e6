"""Issue 21's two lifecycle targets: how long ``break`` takes with queued builds, and how
soon a later epoch's first batch arrives from persistent worker processes.

Run: ``.venv/bin/python benchmarks/micro/leave_and_return.py [--repeat 5]``. Prints one
JSON line with the medians and every measurement.

- ``break``: ``workers=1, prefetch=16``, batches of one sample and a 0.2 s transform; the
  loop takes one batch and breaks. Timed from the ``break`` to the end of the
  ``async with`` (the stream's close). Target <= 0.25 s: the one build running
  finishes, the fifteen queued never start.
- epochs: ``executor="process", workers=2``, 3 epochs of 8 small batches on one loader;
  each epoch timed from opening its stream to its first batch. Target <= 20 ms for the
  second and later epochs (the workers started with the first).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import anyio

from aioloader import DataLoader
from aioloader.core import SequentialSampler
from aioloader.testing import MemoryDataset, StackCollator


def slow_transform(sample: list[float]) -> list[float]:
    time.sleep(0.2)
    return sample


def scale(sample: list[float]) -> list[float]:
    return [2.0 * x for x in sample]


def rows(count: int) -> list[list[float]]:
    return [[float(i)] * 8 for i in range(count)]


async def time_break() -> float:
    loader: DataLoader[Any, Any] = DataLoader(
        MemoryDataset(rows(64)),
        SequentialSampler(64, 1),  # one sample a step: a build takes 0.2 s
        StackCollator(),
        seed=0,
        transform=slow_transform,
        workers=1,
        prefetch=16,
    )
    async with loader.stream(0, None) as batches:
        async for _ in batches:
            left = time.perf_counter()
            break
    return time.perf_counter() - left


async def time_epochs() -> list[float]:
    loader: DataLoader[Any, Any] = DataLoader(
        MemoryDataset(rows(64)),
        SequentialSampler(64, 8),
        StackCollator(),
        seed=0,
        transform=scale,
        executor="process",
        workers=2,
    )
    firsts = []
    try:
        for epoch in range(3):
            opened = time.perf_counter()
            first = None
            async with loader.stream(epoch * 8, (epoch + 1) * 8) as batches:
                async for _ in batches:
                    if first is None:
                        first = time.perf_counter() - opened
            assert first is not None
            firsts.append(first)
    finally:
        await loader.aclose()
    return firsts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each (default 5)")
    args = parser.parse_args()
    breaks = [anyio.run(time_break) for _ in range(args.repeat)]
    epochs = [anyio.run(time_epochs) for _ in range(args.repeat)]
    later = [seconds for run in epochs for seconds in run[1:]]
    print(
        json.dumps(
            {
                "break_seconds_median": round(statistics.median(breaks), 4),
                "break_seconds": [round(x, 4) for x in breaks],
                "first_epoch_first_batch_median": round(statistics.median(r[0] for r in epochs), 4),
                "later_epochs_first_batch_median": round(statistics.median(later), 4),
                "later_epochs_first_batch_max": round(max(later), 4),
                "epochs_first_batch_seconds": [[round(x, 4) for x in run] for run in epochs],
            }
        )
    )


if __name__ == "__main__":
    main()
