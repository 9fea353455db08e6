"""KnownFutureCache in front of TarShards: bounds, zero-request epochs, Belady against LRU."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import obstore
import pytest
from obstore.store import MemoryStore

from aioloader.core import BlockShuffledSampler, SequentialSampler, ShuffledSampler, plan_batch
from aioloader.sources._cache import CacheStatistics, KnownFutureCache
from aioloader.sources._tar import TarShards
from tests._support.proxy import LoopbackProxy
from tests._support.s3 import S3Info
from tests.sources.test_tar import dataset, expected, members_of, tar_bytes

SHARDS, PER_SHARD = 8, 16
N = SHARDS * PER_SHARD


def _upload(store: Any, prefix: str) -> tuple[list[str], list[dict[str, Any]], int]:
    data = dataset(SHARDS, PER_SHARD)
    keys, total = [], 0
    for s, samples in enumerate(data):
        blob = tar_bytes(members_of(samples))
        keys.append(f"{prefix}shard-{s}.tar")
        obstore.put(store, keys[-1], blob)
        total += len(blob)
    return keys, expected(data), total


def _sample_bytes(source: TarShards[Any]) -> int:
    return sum(end - start for start, end in (source.locate(i)[1].span for i in range(N)))


async def _run(source: TarShards[Any], sampler: Any, seed: int, steps: range) -> list[Any]:
    batches = []
    cache = source.cache
    for g in steps:
        batches.append(await source.get_samples(plan_batch(sampler, seed, g).indices.tolist()))
        if cache is not None:
            stats = cache.statistics()
            assert stats.current_bytes <= stats.max_bytes
    return batches


def _want(want: list[Any], sampler: Any, seed: int, steps: range) -> list[Any]:
    return [[want[i] for i in plan_batch(sampler, seed, g).indices.tolist()] for g in steps]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["global", "block"])
async def test_a_cache_the_size_of_the_data_makes_no_request_in_the_second_epoch(
    s3_server: S3Info, s3_prefix: str, kind: str, tmp_path: Path
) -> None:
    store = s3_server.store()
    keys, want, total = _upload(store, s3_prefix)
    TarShards(keys, store, index_dir=tmp_path)  # saved indices: epoch 1 reads the samples
    cache = KnownFutureCache(total, lookahead_steps=4)
    source = TarShards(keys, store, cache=cache, index_dir=tmp_path)
    indexing = source.statistics()
    assert indexing is not None
    sampler: Any = (
        ShuffledSampler(N, 8)
        if kind == "global"
        else BlockShuffledSampler([PER_SHARD] * SHARDS, 8, window=2)
    )
    cache.plan(sampler, 5, 0)
    steps = sampler.steps_per_epoch
    first = await _run(source, sampler, 5, range(steps))
    after_first = source.statistics()
    cache_first = cache.statistics()
    assert after_first is not None
    second = await _run(source, sampler, 5, range(steps, 2 * steps))
    after_second = source.statistics()
    assert after_second is not None
    assert first == _want(want, sampler, 5, range(steps))
    assert second == _want(want, sampler, 5, range(steps, 2 * steps))
    assert after_second.requests == after_first.requests  # zero requests in epoch 2
    stats = cache.statistics()
    assert stats.requests == cache_first.requests
    assert stats.hits - cache_first.hits == N
    assert stats.misses == cache_first.misses
    assert stats.evictions == 0
    assert stats.current_bytes == _sample_bytes(source)
    assert stats.planned_batches == 2 * steps
    # reads are coalesced and grown to whole shards: one GET per shard in epoch 1
    assert cache_first.requests == SHARDS
    assert after_first.requests - indexing.requests == cache_first.requests


@pytest.mark.anyio
@pytest.mark.parametrize("policy", ["belady", "lru"])
async def test_the_cache_never_holds_more_than_its_bound(
    s3_server: S3Info, s3_prefix: str, policy: Any
) -> None:
    store = s3_server.store()
    keys, want, _ = _upload(store, s3_prefix)
    probe = TarShards(keys, store)
    bound = _sample_bytes(probe) // 5
    cache = KnownFutureCache(bound, lookahead_steps=3, policy=policy)
    source = TarShards(keys, store, cache=cache)
    sampler = ShuffledSampler(N, 8)
    cache.plan(sampler, 9, 0)
    steps = range(3 * sampler.steps_per_epoch)
    assert await _run(source, sampler, 9, steps) == _want(want, sampler, 9, steps)
    stats = cache.statistics()
    assert stats.peak_bytes <= bound
    assert stats.current_bytes <= bound
    assert stats.evictions > 0
    assert stats.bytes_evicted > 0
    assert stats.hits + stats.misses == 3 * N


@pytest.mark.anyio
async def test_building_the_index_fills_the_cache(s3_server: S3Info, s3_prefix: str) -> None:
    store = s3_server.store()
    keys, want, total = _upload(store, s3_prefix)
    cache = KnownFutureCache(total, lookahead_steps=4)
    source = TarShards(keys, store, cache=cache)  # the index is built: every byte was read
    indexing = source.statistics()
    assert indexing is not None
    assert indexing.requests == SHARDS  # one ranged GET per shard (HEADs are not counted)
    assert cache.statistics().entries == N
    sampler = ShuffledSampler(N, 8)
    cache.plan(sampler, 4, 0)
    steps = range(2 * sampler.steps_per_epoch)
    assert await _run(source, sampler, 4, steps) == _want(want, sampler, 4, steps)
    after = source.statistics()
    assert after is not None
    assert after.requests == indexing.requests  # two epochs without a request
    small = KnownFutureCache(total // 4)
    TarShards(keys, store, cache=small)
    assert 0 < small.statistics().current_bytes <= total // 4


def _hit_rates(fraction: float, epochs: int, saved: Path) -> dict[str, CacheStatistics]:
    """Two policies, the same access sequence from an empty cache: demand reads only."""
    store = MemoryStore()
    keys, _, _ = _upload(store, "")
    out = {}
    for policy in ("belady", "lru"):
        probe = TarShards(keys, store, index_dir=saved)  # loaded indices: nothing offered
        cache = KnownFutureCache(
            int(_sample_bytes(probe) * fraction),
            lookahead_steps=0,
            policy=policy,  # type: ignore[arg-type]
            coalesce_gap=0,
        )
        source = TarShards(keys, store, cache=cache, index_dir=saved)
        sampler = ShuffledSampler(N, 8)
        cache.plan(sampler, 1, 0)
        anyio.run(_run, source, sampler, 1, range(epochs * sampler.steps_per_epoch))
        out[policy] = cache.statistics()
    return out


def test_belady_beats_lru_by_far_with_a_quarter_of_the_data(tmp_path: Path) -> None:
    stats = _hit_rates(0.25, 4, tmp_path)
    belady, lru = stats["belady"].hit_rate, stats["lru"].hit_rate
    print(f"25% cache, global shuffle, 4 epochs: belady {belady:.4f} lru {lru:.4f}")
    assert belady >= 1.3 * lru
    assert (stats["belady"].hits, stats["lru"].hits) == (94, 14)  # of 512 reads
    assert stats["belady"].hits + stats["belady"].misses == 4 * N
    assert stats["belady"].current_bytes <= stats["belady"].max_bytes


@pytest.mark.anyio
async def test_concurrent_batches_share_reads_and_unplanned_reads_still_work() -> None:
    store = MemoryStore()
    keys, want, total = _upload(store, "")
    cache = KnownFutureCache(total, lookahead_steps=8)
    source = TarShards(keys, store, cache=cache)
    sampler = SequentialSampler(N, 8)
    cache.plan(sampler, 0, 0)
    results: dict[int, list[Any]] = {}

    async def read(step: int) -> None:
        results[step] = await source.get_samples(sampler.indices(0, 0, step).tolist())

    async with anyio.create_task_group() as group:
        for step in range(8):
            group.start_soon(read, step)
    assert [results[s] for s in range(8)] == [want[s * 8 : s * 8 + 8] for s in range(8)]
    stats = cache.statistics()
    assert stats.misses + stats.hits == 64
    requests_before = stats.requests
    assert await source.get_samples([120, 3, 3]) == [want[120], want[3], want[3]]  # unplanned
    assert await source.get_sample(121) == want[121]
    assert cache.statistics().planned_batches == 8
    assert cache.statistics().requests >= requests_before


@pytest.mark.anyio
async def test_cancelling_a_read_in_flight_leaves_a_consistent_cache(
    s3_server: S3Info, s3_prefix: str, fault_proxy: LoopbackProxy, tmp_path: Path
) -> None:
    keys, want, total = _upload(s3_server.store(), s3_prefix)
    store = s3_server.store(endpoint=fault_proxy.endpoint)
    TarShards(keys, store, index_dir=tmp_path)
    cache = KnownFutureCache(total, lookahead_steps=4)
    source = TarShards(keys, store, cache=cache, index_dir=tmp_path)  # nothing offered
    assert cache.statistics().entries == 0
    sampler = SequentialSampler(N, 8)
    cache.plan(sampler, 0, 0)
    fault_proxy.inject_always(s3_prefix, "stall")  # the reads of step 0 (and 1..4) hang
    reader = source.reader
    assert reader is not None
    with anyio.CancelScope() as scope:

        async def cancel_when_in_flight() -> None:
            while reader.statistics().in_flight == 0:
                await anyio.lowlevel.checkpoint()
            scope.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(cancel_when_in_flight)
            await source.get_samples(sampler.indices(0, 0, 0).tolist())
    assert scope.cancelled_caught
    stats = cache.statistics()
    assert stats.entries == 0
    assert stats.current_bytes == 0
    assert reader.statistics().in_flight == 0
    fault_proxy.clear()
    # the same batch again (now unplanned: step 0 was consumed) and the next ones read fine
    assert await source.get_samples(sampler.indices(0, 0, 0).tolist()) == want[:8]
    assert await source.get_samples(sampler.indices(0, 0, 1).tolist()) == want[8:16]


def test_argument_errors() -> None:
    with pytest.raises(ValueError, match="max_bytes must be an integer >= 1 but got 0"):
        KnownFutureCache(0)
    with pytest.raises(ValueError, match="lookahead_steps must be an integer >= 0 but got -1"):
        KnownFutureCache(10, lookahead_steps=-1)
    with pytest.raises(ValueError, match="policy must be 'belady' or 'lru' but got 'fifo'"):
        KnownFutureCache(10, policy="fifo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="coalesce_gap must be an integer >= 0 but got -1"):
        KnownFutureCache(10, coalesce_gap=-1)
    cache = KnownFutureCache(10)
    with pytest.raises(TypeError, match="sampler must have steps_per_epoch"):
        cache.plan(object(), 0)
    store = MemoryStore()
    keys, _, _ = _upload(store, "")
    TarShards(keys, store, cache=cache)
    with pytest.raises(ValueError, match="already serves another source"):
        TarShards(keys, store, cache=cache)
    with pytest.raises(TypeError, match="cache must be a KnownFutureCache but got dict"):
        TarShards(keys, store, cache={})  # type: ignore[arg-type]


def _unused(samples: Sequence[Any]) -> None:  # keeps Sequence imported for type hints
    del samples


@pytest.mark.parametrize(
    ("kind", "fraction", "requests", "bytes_per_epoch"),
    [("block", 0.5, [11, 12, 7], 0.97), ("global", 0.5, [34, 33, 30], 1.06)],
)
def test_a_half_size_cache_reads_runs_of_shards(
    kind: str, fraction: float, requests: list[int], bytes_per_epoch: float, tmp_path: Path
) -> None:
    store = MemoryStore()
    keys, want, _ = _upload(store, "")
    probe = TarShards(keys, store, index_dir=tmp_path)
    data = _sample_bytes(probe)
    cache = KnownFutureCache(int(data * fraction), lookahead_steps=4)
    source = TarShards(keys, store, cache=cache, index_dir=tmp_path)  # starts empty
    sampler: Any = (
        ShuffledSampler(N, 8)
        if kind == "global"
        else BlockShuffledSampler([PER_SHARD] * SHARDS, 8, window=2)
    )
    cache.plan(sampler, 2, 0)
    steps, per_epoch = sampler.steps_per_epoch, []
    for epoch in range(3):
        before = cache.statistics().requests
        got = anyio.run(_run, source, sampler, 2, range(epoch * steps, (epoch + 1) * steps))
        assert got == _want(want, sampler, 2, range(epoch * steps, (epoch + 1) * steps))
        per_epoch.append(cache.statistics().requests - before)
    stats = cache.statistics()
    assert per_epoch == requests
    assert stats.bytes_fetched / data / 3 == pytest.approx(bytes_per_epoch, abs=0.01)
    assert stats.peak_bytes <= stats.max_bytes
