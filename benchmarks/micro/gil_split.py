"""W1 through the loader: CPU per batch split into GIL-free kernels and GIL-held work.

Run: ``PYTHONPATH=. python benchmarks/micro/gil_split.py [--workers 0,2] [--rounds 3]``.

W1's loader (2,048 line images in a ``MemoryDataset``, batch 128, ``ImageBatchCollator``
with ``GainOffset``, prefetch 8, ``async for`` on uvloop) with each ``workers`` setting,
interleaved over the rounds. Every compiled kernel is wrapped to add its
``time.thread_time`` (CPU of the calling thread, the GIL released); the process's CPU
minus that is what ran with the GIL held, on any thread (plus the waits for it). Unlike
batches/s, these do not depend much on what else the machine runs. Printed per setting:
the median batches/s of the rounds (and each round's), then CPU ms per batch: in all, on
the event loop's thread, inside the kernels, and the rest (GIL-held). A setting with
``workers=2`` can scale only while ``GIL-held`` stays well below the time of a whole batch
at ``workers=0``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import anyio

from aioloader import DataLoader
from aioloader.core import GainOffset, ImageBatchCollator, ShuffledSampler, _kernels
from aioloader.core._backend import load
from aioloader.datasets import line_images
from aioloader.testing import MemoryDataset

IMAGES, BATCH, PREFETCH = 2048, 128, 8
KERNELS = ("fill_images", "fill_image_batch", "check_image_batch", "image_widths", "permute")


def wrap_kernels(spent: list[float]) -> None:
    """Make every compiled kernel add its calling thread's CPU seconds to ``spent``."""
    load()
    for name in KERNELS:
        kernel = getattr(_kernels, name, None)
        if kernel is None:  # an older aioloader without it
            continue

        def timed(*args: Any, _kernel: Callable[..., Any] = kernel) -> Any:
            started = time.thread_time()
            try:
                return _kernel(*args)
            finally:
                spent.append(time.thread_time() - started)

        setattr(_kernels, name, timed)


def measure(dataset: Any, workers: int, count: int, spent: list[float]) -> dict[str, float]:
    """One stream of ``16 + count`` batches; the figures of the last ``count``."""
    loader = DataLoader(
        dataset,
        ShuffledSampler(IMAGES, BATCH),
        ImageBatchCollator(4, augment=GainOffset()),
        seed=0,
        workers=workers,
        prefetch=PREFETCH,
    )
    marks: dict[str, float] = {}

    async def consume() -> None:
        seen = 0
        async with loader.stream(0, 16 + count) as stream:
            async for batch in stream:
                if seen == 16:
                    spent.clear()
                    marks.update(wall=time.perf_counter(), cpu=time.process_time())
                    marks["loop"] = time.thread_time()
                batch.release()
                seen += 1
            marks["wall"] = time.perf_counter() - marks["wall"]
            marks["cpu"] = time.process_time() - marks["cpu"]
            marks["loop"] = time.thread_time() - marks["loop"]

    anyio.run(consume, backend="asyncio", backend_options={"use_uvloop": True})
    per_batch = 1e3 / count
    kernels = sum(spent) * per_batch
    return {
        "rate": count / marks["wall"],
        "cpu": marks["cpu"] * per_batch,
        "loop": marks["loop"] * per_batch,
        "kernels": kernels,
        "gil": marks["cpu"] * per_batch - kernels,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", default="0,2", help="comma-separated settings")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=1024, help="batches timed per stream")
    args = parser.parse_args()
    settings = [int(w) for w in args.workers.split(",")]
    spent: list[float] = []
    wrap_kernels(spent)
    dataset = MemoryDataset(list(line_images(IMAGES, 32, 64, 256, seed=0)._samples))
    for workers in settings:  # warm-up: threads, pools, kernels
        measure(dataset, workers, 64, spent)
    results: dict[int, list[dict[str, float]]] = {w: [] for w in settings}
    for _ in range(args.rounds):
        for workers in settings:
            results[workers].append(measure(dataset, workers, args.count, spent))
    for workers in settings:
        rows = results[workers]

        def med(key: str, rows: list[dict[str, float]] = rows) -> float:
            return statistics.median(row[key] for row in rows)

        rates = ", ".join(f"{row['rate']:,.0f}" for row in rows)
        print(
            f"workers={workers}: {med('rate'):,.0f} batches/s ({rates}); CPU ms/batch: "
            f"all {med('cpu'):.3f}, loop thread {med('loop'):.3f}, "
            f"kernels {med('kernels'):.3f}, GIL-held {med('gil'):.3f}"
        )


if __name__ == "__main__":
    main()
