"""Engine overhead per sample: what the loader adds around the user's own ``get_sample``."""

import json
import statistics
import sys
import time
from collections.abc import Sequence
from itertools import product
from pathlib import Path

import anyio

from aioloader import DataLoader, SequentialSampler, takes_plan
from aioloader.core import BatchPlan

sys.path.insert(0, str(Path(__file__).parents[2]))  # run by path: the repo root, for benchmarks
from benchmarks.micro._common import BACKENDS, drain, options

MEASURES = ("loader_us_per_sample", "plain_us_per_sample", "overhead_us_per_sample")


class Immediate:
    """``get_sample`` that completes without waiting (memory, cache hit)."""

    def __init__(self, n: int) -> None:
        self.items = list(range(n))

    def __len__(self) -> int:
        return len(self.items)

    async def get_sample(self, index: int) -> int:
        return self.items[index]


class Suspending(Immediate):
    """``get_sample`` that yields to the event loop once."""

    async def get_sample(self, index: int) -> int:
        await anyio.sleep(0)  # noqa: ASYNC115 - the user's code, as users write it
        return self.items[index]


@takes_plan
def count(samples: Sequence[int], plan: BatchPlan | None) -> int:
    return len(samples)


async def plain_loop(dataset: Immediate, batch: int, steps: int) -> float:
    """Seconds for the loop a user would write instead: the same reads and collator."""
    sampler = SequentialSampler(len(dataset), batch)
    started = time.perf_counter()
    for step in range(steps):
        indices = sampler.indices(0, 0, step % sampler.steps_per_epoch).tolist()
        count([await dataset.get_sample(i) for i in indices], None)
    return time.perf_counter() - started


if __name__ == "__main__":
    args = options(__doc__, samples=65536, rounds=5, output="")  # --output: the rows as JSON
    kinds = {"immediate": Immediate, "suspending": Suspending}
    rows = []
    for (name, backend), kind, batch in product(BACKENDS.items(), kinds, (1, 16, 128, 1024)):
        steps = max(8, args.samples // batch)
        loader_us, plain_us = [], []
        for _ in range(args.rounds):
            dataset = kinds[kind](steps * batch)
            loader = DataLoader(dataset, SequentialSampler(len(dataset), batch), count, seed=0)
            loader_us.append(anyio.run(drain, loader, steps, **backend) / (steps * batch) * 1e6)
            plain_s = anyio.run(plain_loop, dataset, batch, steps, **backend)
            plain_us.append(plain_s / (steps * batch) * 1e6)
        over = [a - b for a, b in zip(loader_us, plain_us, strict=True)]
        medians = [statistics.median(values) for values in (loader_us, plain_us, over)]
        row = {"backend": name, "get_sample": kind, "batch": batch}
        rows.append(row | dict(zip(MEASURES, medians, strict=True)))
        print(
            f"{name:8} {kind:10} batch {batch:5}: loader {medians[0]:6.2f} us, plain "
            f"{medians[1]:6.2f} us, overhead {medians[2]:6.2f} us/sample",
            flush=True,
        )
    if args.output:
        command = " ".join(["python", "benchmarks/micro/bench_overhead.py", *sys.argv[1:]])
        data = {"command": command, "rows": rows}
        Path(args.output).write_text(json.dumps(data, indent=2) + "\n")
