"""Engine overhead per sample: what the loader adds around the user's own ``get_sample``.

Run: ``.venv/bin/python benchmarks/micro/bench_overhead.py [--samples 65536] [--rounds 5]``.
docs/benchmarks.md (micro-benchmarks) says what it measures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from aioloader import DataLoader, SequentialSampler
from aioloader.core import BatchPlan

BACKENDS: dict[str, tuple[str, dict[str, Any]]] = {
    "asyncio": ("asyncio", {"use_uvloop": False}),
    "uvloop": ("asyncio", {"use_uvloop": True}),
    "trio": ("trio", {}),
}
BATCH_SIZES = (1, 16, 128, 1024)


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


def count(samples: Sequence[int], plan: BatchPlan) -> int:
    return len(samples)


async def run_loader(dataset: Immediate, batch: int, steps: int) -> float:
    loader = DataLoader(dataset, SequentialSampler(len(dataset), batch), count, seed=0)
    started = time.perf_counter()
    async with loader.stream(0, steps) as batches:
        async for _ in batches:
            pass
    return time.perf_counter() - started


async def run_plain(dataset: Immediate, batch: int, steps: int) -> float:
    sampler = SequentialSampler(len(dataset), batch)
    started = time.perf_counter()
    for step in range(steps):
        indices = sampler.indices(0, 0, step % sampler.steps_per_epoch).tolist()
        samples = [await dataset.get_sample(i) for i in indices]
        count(samples, None)  # type: ignore[arg-type]
    return time.perf_counter() - started


def measure(backend: str, kind: str, batch: int, samples: int) -> tuple[float, float]:
    name, options = BACKENDS[backend]
    steps = max(8, samples // batch)
    dataset = (Immediate if kind == "immediate" else Suspending)(steps * batch)
    loader_s = anyio.run(run_loader, dataset, batch, steps, backend=name, backend_options=options)
    plain_s = anyio.run(run_plain, dataset, batch, steps, backend=name, backend_options=options)
    total = steps * batch
    return loader_s / total * 1e6, plain_s / total * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=65536, help="samples per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", type=Path, default=None, help="write the table as JSON")
    args = parser.parse_args(argv)
    rows = []
    for backend in BACKENDS:
        for kind in ("immediate", "suspending"):
            for batch in BATCH_SIZES:
                loader_us, plain_us = [], []
                for _ in range(args.rounds):
                    a, b = measure(backend, kind, batch, args.samples)
                    loader_us.append(a)
                    plain_us.append(b)
                over = [a - b for a, b in zip(loader_us, plain_us, strict=True)]
                row = {
                    "backend": backend,
                    "get_sample": kind,
                    "batch": batch,
                    "loader_us_per_sample": statistics.median(loader_us),
                    "plain_us_per_sample": statistics.median(plain_us),
                    "overhead_us_per_sample": statistics.median(over),
                }
                rows.append(row)
                loader_text = f"{row['loader_us_per_sample']:6.2f}"
                plain_text = f"{row['plain_us_per_sample']:6.2f}"
                print(
                    f"{backend:8} {kind:10} batch {batch:5}: loader {loader_text} us, plain "
                    f"{plain_text} us, overhead {row['overhead_us_per_sample']:6.2f} us/sample",
                    flush=True,
                )
    if args.output is not None:
        args.output.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
