"""A consumer whose step holds the event loop: ``async for`` against ``for`` (issue 34, item 4).

The consumer's step blocks its thread for ``--hold-ms`` (a training step launched from the
loop's thread); worker processes build the batches (``--workers``, each sample costs
``SAMPLE_MS`` of CPU). With ``for`` the engine's loop runs in a thread of its own; with
``async for`` it is the consumer's loop, held during every step. Target: ``async for`` >=
0.97x ``for`` in batches/s. The row "async dataset" reads in the parent, on the held loop
(not fed off the loop: shown for comparison).

    python benchmarks/run.py --micro held_loop --steps 60
"""

import contextlib
import sys
import time
from pathlib import Path

import anyio

from aioloader import DataLoader
from aioloader.core import SequentialSampler
from aioloader.testing import MemoryDataset, StackCollator

sys.path.insert(0, str(Path(__file__).parents[2]))  # run by path: the repo root, for benchmarks
from benchmarks.micro._common import BACKENDS, options

SAMPLE_MS = 2.0


def spin(sample: list[float]) -> list[float]:
    """CPU work of ``SAMPLE_MS`` per sample (a busy loop: it holds the worker's core)."""
    end = time.perf_counter() + SAMPLE_MS / 1e3
    while time.perf_counter() < end:
        pass
    return sample


def make_loader(args, dataset_kind: str) -> DataLoader:
    samples = [[float(i)] * 16 for i in range(args.batch * (args.steps + args.warmup))]
    dataset = MemoryDataset(samples) if dataset_kind == "async" else samples
    return DataLoader(
        dataset,
        SequentialSampler(len(samples), args.batch),
        StackCollator(),
        seed=0,
        transform=spin,
        executor="process",
        workers=args.workers,
        prefetch=args.prefetch,
    )


def held(args) -> None:
    time.sleep(args.hold_ms / 1e3)  # the step holds this thread (and the loop, in async for)


async def rate_async(args, dataset_kind: str = "sync") -> float:
    loader = make_loader(args, dataset_kind)
    async with contextlib.aclosing(loader):
        async with loader.stream(0, args.warmup) as batches:
            async for _ in batches:
                pass
        async with loader.stream(args.warmup, args.warmup + args.steps) as batches:
            started = time.perf_counter()
            async for _ in batches:
                held(args)
            return args.steps / (time.perf_counter() - started)


def rate_sync(args) -> float:
    loader = make_loader(args, "sync")
    try:
        for _ in loader.iter_sync(0, args.warmup):
            pass
        started = time.perf_counter()
        for _ in loader.iter_sync(args.warmup, args.warmup + args.steps):
            held(args)
        return args.steps / (time.perf_counter() - started)
    finally:
        anyio.run(loader.aclose)


def main() -> None:
    args = options(
        __doc__,
        steps=60,
        warmup=6,
        batch=8,
        workers=2,
        prefetch=4,
        hold_ms=20.0,
    )
    bound = 1e3 / args.hold_ms
    print(
        f"held loop: {args.hold_ms:g} ms per step (at most {bound:.1f} batches/s), "
        f"{args.workers} processes, batch {args.batch} x {SAMPLE_MS:g} ms, "
        f"prefetch {args.prefetch}"
    )
    rate_sync(args)  # not counted: the process's first stream pays one-time costs
    plain = rate_sync(args)
    print(f"  for (iter_sync)            {plain:7.1f} batches/s")
    for name, run in BACKENDS.items():
        rate = anyio.run(rate_async, args, **run)
        print(f"  async for, {name:<15} {rate:7.1f} batches/s  {rate / plain:5.2f}x for")
    rate = anyio.run(rate_async, args, "async", **BACKENDS["uvloop"])
    print(f"  async for, uvloop, async dataset {rate:7.1f} batches/s  {rate / plain:5.2f}x for")


if __name__ == "__main__":
    main()
