"""Requests and cache hit rates per epoch of TarShards: global or block shuffle, cache or not."""

import itertools
import tempfile
from typing import Any, Literal

import anyio
import numpy as np
import obstore
from obstore.store import MemoryStore

from aioloader.core import BlockShuffledSampler, ShuffledSampler
from aioloader.sources import KnownFutureCache, ObjectStoreStatistics, TarShards

from ._common import options
from .bench_tar_index import _shard

BATCH, SEED = 64, 0
# label: the share of the data the cache may hold, and its policy (None: no cache)
CACHES: dict[str, tuple[float, Literal["belady", "lru"]] | None] = {
    "none": None,
    "Belady, 100%": (1.0, "belady"),
    "Belady, 25%": (0.25, "belady"),
    "LRU, 25%": (0.25, "lru"),
}


def _statistics(source: TarShards[Any]) -> ObjectStoreStatistics:
    stats = source.statistics()
    assert stats is not None
    return stats


async def _epochs(source: TarShards[Any], sampler: Any, epochs: int) -> list[int]:
    """Requests made in each epoch."""
    per_epoch = []
    for epoch in range(epochs):
        before = _statistics(source).requests
        for step in range(sampler.steps_per_epoch):
            await source.get_samples(sampler.indices(SEED, epoch, step).tolist())
        per_epoch.append(_statistics(source).requests - before)
    return per_epoch


if __name__ == "__main__":
    args = options(__doc__, samples=2048, shards=32, epochs=2)
    store, rng, per = MemoryStore(), np.random.default_rng(0), args.samples // args.shards
    keys = [f"s/{k:03d}.tar" for k in range(args.shards)]
    for k, key in enumerate(keys):
        obstore.put(store, key, _shard(k * per, per, rng))
    index_dir = tempfile.mkdtemp()  # saved indices: every row starts with an empty cache
    probe = TarShards(keys, store, index_dir=index_dir)
    n = len(probe)
    data_bytes = sum(end - start for _, start, end in map(probe.span_of, range(n)))
    print(f"{n} samples in {args.shards} shards, {data_bytes / 1e6:.1f} MB of sample data")
    samplers: dict[str, Any] = {"global shuffle": ShuffledSampler(n, BATCH)}
    for window in (4, 16):
        block = BlockShuffledSampler([per] * args.shards, BATCH, window=window)
        samplers[f"block, window {window}"] = block
    print("| order | cache | requests per epoch | cache hit rate | bytes fetched / data |")
    print("|---|---|---|---:|---:|")
    for (order, sampler), (label, setting) in itertools.product(samplers.items(), CACHES.items()):
        cache = None
        if setting is not None:
            share, policy = setting
            cache = KnownFutureCache(int(data_bytes * share), lookahead_steps=16, policy=policy)
        source = TarShards(keys, store, cache=cache, index_dir=index_dir)
        indexing = _statistics(source).bytes_read
        if cache is not None:
            cache.plan(sampler, SEED, 0)
        requests = anyio.run(_epochs, source, sampler, args.epochs)
        fetched = (_statistics(source).bytes_read - indexing) / (data_bytes * args.epochs)
        hit = "" if cache is None else f"{cache.statistics().hit_rate:.3f}"
        print(f"| {order} | {label} | {requests} | {hit} | {fetched:.2f} |")
