"""What keeping to_torch's tensors valid costs per batch: exported views vs a copy at release.

Three ways to hand a pooled batch (a PaddedBatch, 3 pooled buffers and the indices) to
torch and release it, each timed over the same batches (median of rounds):

- ``shared``: the previous ``to_torch`` (the same walk, ``torch.from_numpy`` of each field,
  nothing kept out of the pool: a kept tensor was overwritten by a later batch);
- ``exported``: ``to_torch`` now: each field through ``PooledBatch.export`` (a view and a
  weakref finalizer), the buffers back in the pool once the tensors are collected;
- ``copied``: the previous walk over a copy of every field made before ``release()`` (the
  other way to stay valid).

Run: ``python benchmarks/micro/kept_tensors.py [--rounds 7] [--batches 2000]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from aioloader.core import BatchPlan, BufferPool, PadCollator
from aioloader.interop._walk import TensorBatch, map_batch
from aioloader.interop.torch import to_torch


def _batches(rows: int, width: int, count: int) -> Callable[[int], Any]:
    pool = BufferPool()
    collator = PadCollator(pool=pool)
    samples = [np.ones((width, 3), np.float32) for _ in range(rows)]
    plans = [BatchPlan(0, g, 0, g, np.arange(rows, dtype=np.int64)) for g in range(count)]

    def build(g: int) -> Any:
        return collator(samples, plans[g])

    return build


def _tensor(value: Any) -> Any:
    return torch.from_numpy(value) if isinstance(value, np.ndarray) else None


def _tensors(fields: dict[str, Any]) -> TensorBatch:
    return TensorBatch(**fields)


def shared(batch: Any) -> Any:
    """The previous ``to_torch``: the same walk, tensors share the buffers, nothing kept."""
    with batch:
        return map_batch(batch, _tensor, _tensors)


def exported(batch: Any) -> Any:
    """``to_torch`` now: the buffers stay out of the pool while a tensor shares them."""
    with batch:
        return to_torch(batch)


def copied(batch: Any) -> Any:
    """The previous ``to_torch`` on a copy of every field made before ``release()``."""
    with batch:
        return map_batch(
            batch, lambda v: _tensor(v.copy()) if isinstance(v, np.ndarray) else None, _tensors
        )


def per_batch(way: Callable[[Any], Any], rows: int, width: int, count: int, rounds: int) -> float:
    """Median over rounds of the mean time of ``way(batch)`` (the build is not timed)."""
    times = []
    for _ in range(rounds):
        build = _batches(rows, width, count)
        kept = None
        spent = 0.0
        for g in range(count):
            batch = build(g)
            started = time.perf_counter()
            kept = way(batch)  # the previous batch's tensors die here, as in a loop
            spent += time.perf_counter() - started
        times.append(spent / count)
        del kept
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=2000)
    args = parser.parse_args()
    for rows, width in ((32, 16), (256, 1024)):
        nbytes = rows * width * (3 * 4 + 1) + rows * 16
        base = per_batch(lambda b: b.release(), rows, width, args.batches, args.rounds)
        print(
            f"batch of {rows}x{width}x3 float32 ({nbytes / 2**20:.2f} MiB), release alone "
            f"{base * 1e6:.1f} us"
        )
        for way in (shared, exported, copied):
            cost = per_batch(way, rows, width, args.batches, args.rounds) - base
            print(f"  {way.__name__:9s} +{cost * 1e6:8.1f} us per batch")


if __name__ == "__main__":
    main()
