"""Leaving a loop with builds queued; later epochs' first batches (docs/benchmarks.md).

Issue 21's targets: ``break`` <= 0.25 s; a later epoch's first batch <= 20 ms.
"""

import argparse
import contextlib
import json
import statistics
import time

import anyio

from aioloader import DataLoader
from aioloader.core import SequentialSampler
from aioloader.testing import MemoryDataset, StackCollator


def slow_transform(sample: list[float]) -> list[float]:
    time.sleep(0.2)
    return sample


def scale(sample: list[float]) -> list[float]:
    return [2.0 * x for x in sample]


def make_loader(batch: int, **options) -> DataLoader:
    dataset = MemoryDataset([[float(i)] * 8 for i in range(64)])
    return DataLoader(dataset, SequentialSampler(64, batch), StackCollator(), seed=0, **options)


async def time_break() -> float:
    loader = make_loader(1, transform=slow_transform, workers=1, prefetch=16)
    async with loader.stream(0, None) as batches:
        async for _ in batches:
            left = time.perf_counter()
            break
    return time.perf_counter() - left


async def time_epochs() -> list[float]:
    loader = make_loader(8, transform=scale, executor="process", workers=2)
    firsts = []
    async with contextlib.aclosing(loader):
        for epoch in range(3):
            opened = time.perf_counter()
            async with loader.stream(epoch * 8, (epoch + 1) * 8) as batches:
                arrivals = [time.perf_counter() - opened async for _ in batches]
            firsts.append(arrivals[0])
    return firsts


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each (default 5)")
    repeat = parser.parse_args().repeat
    breaks = [anyio.run(time_break) for _ in range(repeat)]
    epochs = [anyio.run(time_epochs) for _ in range(repeat)]
    later = [seconds for run in epochs for seconds in run[1:]]
    figures = {
        "break_seconds_median": round(statistics.median(breaks), 4),
        "break_seconds": [round(x, 4) for x in breaks],
        "first_epoch_first_batch_median": round(statistics.median(r[0] for r in epochs), 4),
        "later_epochs_first_batch_median": round(statistics.median(later), 4),
        "later_epochs_first_batch_max": round(max(later), 4),
        "epochs_first_batch_seconds": [[round(x, 4) for x in run] for run in epochs],
    }
    print(json.dumps(figures))
