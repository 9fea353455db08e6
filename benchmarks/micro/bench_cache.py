"""Requests and cache hit rates per epoch of TarShards: global or block shuffle, cache or not.

Run: ``python -m benchmarks.micro.bench_cache [--samples 2048] [--shards 32] [--epochs 2]``.
docs/benchmarks.md (micro-benchmarks) says what it measures.
"""

from __future__ import annotations

import argparse
import tempfile
from typing import Any

import anyio
import numpy as np
import obstore
from obstore.store import MemoryStore

from aioloader.core import BlockShuffledSampler, ShuffledSampler
from aioloader.sources import KnownFutureCache, TarShards

from .bench_tar_index import _shard

BATCH, SEED = 64, 0


async def _epochs(source: TarShards[Any], sampler: Any, epochs: int) -> list[int]:
    """Requests made in each epoch."""
    per_epoch = []
    for epoch in range(epochs):
        before = source.statistics()
        assert before is not None
        for step in range(sampler.steps_per_epoch):
            await source.get_samples(sampler.indices(SEED, epoch, step).tolist())
        after = source.statistics()
        assert after is not None
        per_epoch.append(after.requests - before.requests)
    return per_epoch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--shards", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    store = MemoryStore()
    per = args.samples // args.shards
    rng = np.random.default_rng(0)
    keys = [f"s/{k:03d}.tar" for k in range(args.shards)]
    for k, key in enumerate(keys):
        obstore.put(store, key, _shard(k * per, per, rng))
    index_dir = tempfile.mkdtemp()  # saved indices: every row starts with an empty cache
    probe = TarShards(keys, store, index_dir=index_dir)
    data_bytes = sum(end - start for _, start, end in map(probe.span_of, range(len(probe))))
    n = len(probe)
    print(f"{n} samples in {args.shards} shards, {data_bytes / 1e6:.1f} MB of sample data")
    print("| order | cache | requests per epoch | cache hit rate | bytes fetched / data |")
    print("|---|---|---|---:|---:|")
    samplers = {
        "global shuffle": ShuffledSampler(n, BATCH),
        "block, window 4": BlockShuffledSampler([per] * args.shards, BATCH, window=4),
        "block, window 16": BlockShuffledSampler([per] * args.shards, BATCH, window=16),
    }
    caches: list[tuple[str, float | None, Any]] = [
        ("none", None, None),
        ("Belady, 100%", 1.0, "belady"),
        ("Belady, 25%", 0.25, "belady"),
        ("LRU, 25%", 0.25, "lru"),
    ]
    for order, sampler in samplers.items():
        for label, fraction, policy in caches:
            cache = (
                None
                if fraction is None
                else KnownFutureCache(int(data_bytes * fraction), lookahead_steps=16, policy=policy)
            )
            source = TarShards(keys, store, cache=cache, index_dir=index_dir)
            indexing = source.statistics()
            assert indexing is not None
            if cache is not None:
                cache.plan(sampler, SEED, 0)
            requests = anyio.run(_epochs, source, sampler, args.epochs)
            stats = source.statistics()
            assert stats is not None
            fetched = (stats.bytes_read - indexing.bytes_read) / (data_bytes * args.epochs)
            hit = "" if cache is None else f"{cache.statistics().hit_rate:.3f}"
            print(f"| {order} | {label} | {requests} | {hit} | {fetched:.2f} |")


if __name__ == "__main__":
    main()
