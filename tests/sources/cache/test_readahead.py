"""aioloader.sources.cache._readahead: where memory has no room for a run read ahead, the run
lands in the disk tier: one request a shard, as with room in memory. There it waits for its
step unranked (never evicted before its use), is ranked once used, and is ranked to go
first once no plan needs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from aioloader.core import plan_batch
from aioloader.sources.cache import KnownFutureCache
from tests.sources.cache.helpers import (
    SEED,
    SHARDS,
    LoggedShards,
    N,
    expected_batches,
    run_epochs,
    samplers,
    shard_blobs,
    want_of,
)

BLOBS = shard_blobs()
WANT = want_of(BLOBS)
DATASET = sum(len(blob) for blob in BLOBS)


def _cache(tmp_path: Path) -> KnownFutureCache:
    """Memory that holds nothing, and a disk tier that holds everything."""
    return KnownFutureCache(1, disk_dir=tmp_path / "disk", disk_bytes=DATASET, lookahead_steps=8)


def test_runs_land_in_the_disk_tier_when_memory_has_no_room(
    local_shards: tuple[list[str], Path], tmp_path: Path
) -> None:
    paths, index = local_shards
    cache = _cache(tmp_path)
    sampler = samplers()["block"]
    got = run_epochs(LoggedShards(paths, index_dir=index, cache=cache), sampler, 1)
    assert got.batches == expected_batches(WANT, sampler, range(sampler.steps_per_epoch))
    stats = cache.statistics()
    assert got.requests == [SHARDS]  # whole shards, as with room in memory
    assert stats.peak_bytes <= 1  # memory held nothing
    assert stats.prefetched == stats.prefetch_hits == N - stats.misses
    assert stats.disk_hits == N - stats.misses
    assert stats.bytes_waiting == stats.bytes_dropped == 0
    assert stats.bytes_fetched == stats.bytes_used + stats.bytes_between


async def _first_step(source: LoggedShards, sampler: Any) -> set[int]:
    """Read step 0; returns the samples read ahead into the disk tier, not used yet."""
    source.plan_reads(sampler, SEED, 0)
    await source.get_samples(plan_batch(sampler, SEED, 0).indices.tolist())
    cache = source.cache
    assert isinstance(cache, KnownFutureCache)
    return set(cache._held.ahead_on_disk)


@pytest.mark.anyio
async def test_read_ahead_on_disk_waits_unranked_for_its_step_then_is_ranked(
    local_shards: tuple[list[str], Path], tmp_path: Path
) -> None:
    paths, index = local_shards
    cache = _cache(tmp_path)
    disk = cache.disk
    assert disk is not None
    source = LoggedShards(paths, index_dir=index, cache=cache)
    sampler = samplers()["block"]
    ahead = await _first_step(source, sampler)
    step_1 = set(plan_batch(sampler, SEED, 1).indices.tolist())
    assert step_1 <= ahead
    assert all(unit in disk for unit in ahead)  # booked (their files written or on the way)
    assert not [unit for unit in ahead if unit in disk.order]  # never a victim before use
    await source.get_samples(sorted(step_1))
    assert not step_1 & set(cache._held.ahead_on_disk)
    assert all(unit in disk.order for unit in step_1)  # used: ranked by their next use


def test_read_ahead_on_disk_that_no_plan_needs_is_ranked_to_go_first(
    local_shards: tuple[list[str], Path], tmp_path: Path
) -> None:
    paths, index = local_shards
    cache = _cache(tmp_path)
    disk = cache.disk
    assert disk is not None
    sampler = samplers()["block"]
    source = LoggedShards(paths, index_dir=index, cache=cache)
    ahead = anyio.run(_first_step, source, sampler)
    assert ahead
    waiting = cache.statistics().bytes_waiting
    assert waiting == sum(disk.sizes[unit] for unit in ahead) > 0
    assert cache.unplan((id(sampler), SEED))
    assert all(unit in disk.order for unit in ahead)  # evictable now, furthest first
    # a new plan ranks them by its own uses, and uses them from disk: nothing waits
    other = samplers()["global"]
    got = run_epochs(source, other, 1)
    assert got.batches == expected_batches(WANT, other, range(other.steps_per_epoch))
    stats = cache.statistics()
    assert stats.bytes_waiting == 0
    assert stats.bytes_fetched == (
        stats.bytes_used + stats.bytes_between + stats.bytes_dropped + stats.bytes_waiting
    )
