"""TarShards on SeaweedFS through the loader: block shuffle, cache, workers, resume, ranks."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import obstore
import pytest

from aioloader import takes_plan
from aioloader.core import BlockShuffledSampler, RankSlice, digest_stream
from aioloader.core._plan import BatchPlan
from aioloader.engine import DataLoader
from aioloader.sources._tar import TarShards
from aioloader.sources.cache import KnownFutureCache
from tests._support.s3 import S3Info
from tests.sources.test_tar import dataset, members_of, tar_bytes

pytestmark = pytest.mark.anyio

SHARDS, PER_SHARD, BATCH, SEED = 6, 12, 8, 31
N = SHARDS * PER_SHARD


def _keys(info: S3Info, prefix: str) -> tuple[list[str], int]:
    store = info.store()
    keys, total = [], 0
    for s, samples in enumerate(dataset(SHARDS, PER_SHARD)):
        blob = tar_bytes(members_of(samples))
        keys.append(f"{prefix}shard-{s}.tar")
        obstore.put(store, keys[-1], blob)
        total += len(blob)
    return keys, total


@takes_plan
def _collate(samples: Sequence[dict[str, Any]], plan: BatchPlan) -> list[dict[str, Any]]:
    return list(samples)


async def _batches(loader: DataLoader[Any, Any], start: int, stop: int) -> list[Any]:
    out = []
    async with loader.stream(start, stop) as batches:
        async for batch in batches:
            out.append(batch)
    return out


def _key_index(info: S3Info, keys: list[str]) -> dict[str, int]:
    source = TarShards(keys, info.store())
    return {source.locate(i)[1].key: i for i in range(len(source))}


@pytest.mark.parametrize("cached", [False, True], ids=["direct", "cached"])
async def test_block_shuffle_reads_every_sample_once_at_any_worker_count(
    s3_server: S3Info, s3_prefix: str, cached: bool
) -> None:
    keys, total = _keys(s3_server, s3_prefix)
    sampler = BlockShuffledSampler([PER_SHARD] * SHARDS, BATCH, window=2)
    steps = sampler.steps_per_epoch
    index_of = _key_index(s3_server, keys)
    digests = []
    for workers in (0, 2):
        cache = KnownFutureCache(total, lookahead_steps=3) if cached else None
        source = TarShards(keys, s3_server.store(), cache=cache)  # the loader plans it
        loader = DataLoader(source, sampler, _collate, seed=SEED, workers=workers, prefetch=4)
        batches = await _batches(loader, 0, 2 * steps)
        for epoch in range(2):
            seen = [
                index_of[sample["__key__"]]
                for batch in batches[epoch * steps : (epoch + 1) * steps]
                for sample in batch
            ]
            assert sorted(seen) == list(range(N))  # exactly once per epoch
        for g, batch in enumerate(batches):
            want = sampler.indices(SEED, g // steps, g % steps).tolist()
            assert [index_of[s["__key__"]] for s in batch] == want
        digests.append(digest_stream(batches))
        if cache is not None:
            stats = cache.statistics()
            assert stats.planned_batches == 2 * steps
            assert stats.hits + stats.misses == 2 * N
            assert stats.current_bytes <= stats.max_bytes
    assert digests[0] == digests[1]


async def test_resume_mid_epoch_and_elastic_ranks_give_the_same_batches(
    s3_server: S3Info, s3_prefix: str
) -> None:
    keys, total = _keys(s3_server, s3_prefix)
    sampler = BlockShuffledSampler([PER_SHARD] * SHARDS, BATCH, window=2)
    steps = sampler.steps_per_epoch
    whole = await _batches(
        DataLoader(TarShards(keys, s3_server.store()), sampler, _collate, seed=SEED),
        0,
        2 * steps,
    )
    middle = steps + steps // 2
    cache = KnownFutureCache(total // 2, lookahead_steps=2)
    cached = TarShards(keys, s3_server.store(), cache=cache)
    # the loader plans from the resume step by itself
    resumed = await _batches(DataLoader(cached, sampler, _collate, seed=SEED), middle, 2 * steps)
    assert resumed == whole[middle:]
    TarShards(keys, s3_server.store()).plan_reads(sampler, SEED, 0)  # no cache: nothing
    assert cache.statistics().planned_batches == 2 * steps - middle
    for world in (2, 4):
        parts = []
        for rank in range(world):
            ranked = RankSlice(sampler, rank, world)
            loader = DataLoader(TarShards(keys, s3_server.store()), ranked, _collate, seed=SEED)
            parts.append(await _batches(loader, middle, 2 * steps))
        joined = [[s for part in parts for s in part[g]] for g in range(2 * steps - middle)]
        assert joined == whole[middle:]


@pytest.mark.parametrize("workers", [0, 2])
async def test_block_shuffle_with_a_cache_is_one_get_per_shard_and_nothing_past_the_stop(
    s3_server: S3Info, s3_prefix: str, workers: int, tmp_path: Path
) -> None:
    keys, total = _keys(s3_server, s3_prefix)
    probe = TarShards(keys, s3_server.store(), index_dir=tmp_path)  # saved: no reads later
    sampler = BlockShuffledSampler([len(index.samples) for index in probe.indices], BATCH, window=3)
    steps = sampler.steps_per_epoch
    # room to read every shard ahead whole (with less, shards are read in several ranges)
    cache = KnownFutureCache(total)
    source = TarShards(keys, s3_server.store(), index_dir=tmp_path, cache=cache)
    before = source.statistics()
    assert before is not None
    # prefetch 8: the reads of 8 steps start at once and must not split a shard between them
    loader = DataLoader(source, sampler, _collate, seed=SEED, workers=workers, prefetch=8)
    batches = await _batches(loader, 0, steps)
    after = source.statistics()
    assert after is not None
    assert after.requests - before.requests == SHARDS  # one GET of each whole shard
    stats = cache.statistics()
    assert stats.bytes_waiting == 0  # nothing read for the epoch after the stop
    sample_bytes = sum(
        end - start for index in source.indices for start, end in (s.span for s in index.samples)
    )
    assert stats.bytes_used == sample_bytes  # every sample's bytes, once
    assert stats.bytes_fetched - stats.bytes_used == stats.bytes_unused  # headers only
    assert len(batches) == steps
