"""KnownFutureCache on SeaweedFS: bytes fetched once, near the optimum, the tiers, the loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from obstore.store import MemoryStore

from aioloader import takes_plan
from aioloader.core import SequentialSampler, ShuffledSampler, digest_stream
from aioloader.core._plan import BatchPlan
from aioloader.engine import DataLoader
from aioloader.sources._tar import TarShards
from aioloader.sources.cache import CacheStatistics, KnownFutureCache
from tests._support.proxy import LoopbackProxy
from tests._support.s3 import S3Info
from tests.sources.cache.helpers import (
    BATCH,
    PER_SHARD,
    SEED,
    SHARDS,
    LoggedShards,
    N,
    expected_batches,
    run_epochs,
    samplers,
    shard_blobs,
    upload,
    want_of,
)

BLOBS = shard_blobs()
WANT = want_of(BLOBS)
DATASET = sum(len(blob) for blob in BLOBS)


def _sample_bytes(source: TarShards[Any]) -> int:
    return sum(end - start for _, start, end in map(source.span_of, range(len(source))))


def _identity(stats: CacheStatistics) -> None:
    assert stats.bytes_unused == stats.bytes_between + stats.bytes_dropped
    assert stats.bytes_fetched == (
        stats.bytes_used + stats.bytes_between + stats.bytes_dropped + stats.bytes_waiting
    )


# the bounds on epochs 2 and 3: bytes / (sample bytes - max_bytes)
BOUND_OVER_OPTIMUM = {"global": 1.2, "block": 1.1}


@pytest.mark.parametrize("fraction", [0.25, 0.5])
@pytest.mark.parametrize("kind", ["global", "block"])
def test_three_epochs_fetch_each_byte_once_near_the_optimum_and_never_more_than_no_cache(
    s3_server: S3Info,
    s3_prefix: str,
    fault_proxy: LoopbackProxy,
    tmp_path: Path,
    kind: str,
    fraction: float,
) -> None:
    keys = upload(s3_server.store(), s3_prefix, BLOBS)
    store = s3_server.store(endpoint=fault_proxy.endpoint)
    sampler = samplers()[kind]
    steps = sampler.steps_per_epoch
    plain = LoggedShards(keys, store, index_dir=tmp_path)  # saves the indices
    baseline = run_epochs(plain, sampler, 3, per_epoch=True)
    data = _sample_bytes(plain)
    # max_bytes bounds everything held, read-ahead included (at most 2 shards of it)
    cache = KnownFutureCache(
        int(data * fraction), readahead_bytes=2 * DATASET // SHARDS, lookahead_steps=4
    )
    source = LoggedShards(keys, store, index_dir=tmp_path, cache=cache)  # starts empty
    fault_proxy.clear()
    got = run_epochs(source, sampler, 3, per_epoch=True)  # a stream an epoch, as `async for`
    assert got.batches == expected_batches(WANT, sampler, range(3 * steps))
    assert baseline.batches == got.batches
    for epoch in range(3):  # no sample is fetched twice for a use in an epoch: what reads
        # carry beyond is headers and samples held that a run passed over (one request)
        assert got.used[epoch] <= data
        assert got.used[epoch] + got.between[epoch] == got.fetched[epoch]
    assert got.fetched[0] <= DATASET  # epoch 1: each byte at most once
    for epoch in range(3):
        assert got.fetched[epoch] <= baseline.fetched[epoch]  # never more than no cache
    optimum = data - cache.max_bytes
    later = [round(got.fetched[e] / optimum, 3) for e in (1, 2)]
    print(
        f"{kind} {fraction:.0%}: requests {got.requests} (no cache {baseline.requests}); "
        f"bytes/dataset {[round(b / DATASET, 3) for b in got.fetched]} "
        f"(no cache {[round(b / DATASET, 3) for b in baseline.fetched]}); "
        f"epochs 2, 3 / optimum {later}"
    )
    assert max(later) <= BOUND_OVER_OPTIMUM[kind]
    stats = cache.statistics()
    _identity(stats)
    assert stats.bytes_dropped == stats.bytes_waiting == 0  # every read-ahead byte was used
    assert stats.requests == len(source.log) == sum(got.requests)
    assert stats.bytes_fetched == sum(got.fetched)
    assert stats.peak_bytes <= stats.max_bytes
    assert stats.planned_batches == 3 * steps
    assert stats.hits + stats.misses == 3 * N
    gets = [r for r in fault_proxy.records(s3_prefix) if r.method == "GET"]
    assert len(gets) == sum(got.requests)  # the proxy saw exactly the logged reads


def test_whole_shard_and_ranged_reads_mixed_fetch_every_sample_exactly_once(
    s3_server: S3Info, s3_prefix: str, tmp_path: Path
) -> None:
    keys = upload(s3_server.store(), s3_prefix, BLOBS)
    sampler = samplers()["block"]
    TarShards(keys, s3_server.store(), index_dir=tmp_path)
    # room to read ahead two of the four shards a block draws from: some shards are read
    # whole, the others in several ranges
    cache = KnownFutureCache(DATASET, readahead_bytes=2 * DATASET // SHARDS, lookahead_steps=4)
    source = LoggedShards(keys, s3_server.store(), index_dir=tmp_path, cache=cache)
    got = run_epochs(source, sampler, 2)
    assert got.batches == expected_batches(WANT, sampler, range(2 * sampler.steps_per_epoch))
    carried = [list(source.indices_within(*byte_range)) for byte_range in source.log]
    assert sorted({u for run in carried for u in run}) == list(range(N))
    assert got.used == [_sample_bytes(source), 0]  # each sample fetched once for its use
    assert got.used[0] + got.between[0] == got.fetched[0]  # and samples held passed over
    whole = sum(1 for run in carried if len(run) == PER_SHARD)
    assert 0 < whole < SHARDS < len(source.log)
    assert got.requests[1] == 0  # the cache holds the data: epoch 2 reads nothing
    _identity(cache.statistics())


@pytest.mark.parametrize("kind", ["global", "block"])
def test_block_shuffle_costs_one_request_per_shard(
    s3_server: S3Info, s3_prefix: str, tmp_path: Path, kind: str
) -> None:
    keys = upload(s3_server.store(), s3_prefix, BLOBS)
    TarShards(keys, s3_server.store(), index_dir=tmp_path)
    cache = KnownFutureCache(DATASET, readahead_bytes=DATASET, lookahead_steps=4)
    source = LoggedShards(keys, s3_server.store(), index_dir=tmp_path, cache=cache)
    got = run_epochs(source, samplers()[kind], 2)
    if kind == "block":
        assert got.requests == [SHARDS, 0]
    else:  # runs of samples the horizon needs: fewer requests than samples, never 0 bytes
        assert SHARDS < got.requests[0] < N
        assert got.requests[1] == 0
    assert got.fetched[0] <= DATASET


@takes_plan
def _collate(samples: Any, plan: BatchPlan) -> list[bytes]:
    return [sample["bin"] for sample in samples]


async def _stream(loader: DataLoader[Any, Any], start: int, stop: int) -> list[Any]:
    out = []
    async with loader.stream(start, stop) as batches:
        async for batch in batches:
            out.append(batch)
    return out


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["global", "block"])
async def test_the_loader_plans_the_cache_same_batches_at_any_worker_count_and_after_resume(
    s3_server: S3Info, s3_prefix: str, tmp_path: Path, kind: str
) -> None:
    keys = upload(s3_server.store(), s3_prefix, BLOBS)
    sampler = samplers()[kind]
    steps = sampler.steps_per_epoch
    TarShards(keys, s3_server.store(), index_dir=tmp_path)
    want = expected_batches(WANT, sampler, range(2 * steps))
    digests = []
    for workers in (0, 2):
        cache = KnownFutureCache(DATASET // 2, readahead_bytes=DATASET // 4, lookahead_steps=4)
        source = TarShards(keys, s3_server.store(), index_dir=tmp_path, cache=cache)
        loader = DataLoader(source, sampler, _collate, seed=SEED, workers=workers, prefetch=4)
        batches = await _stream(loader, 0, 2 * steps)  # the loader plans: nobody else does
        assert batches == want
        digests.append(digest_stream(batches))
        stats = cache.statistics()
        assert stats.planned_batches == 2 * steps
        assert stats.hits + stats.misses == 2 * N
        _identity(stats)
    assert digests[0] == digests[1]
    middle = steps + steps // 3
    cache = KnownFutureCache(DATASET // 2, readahead_bytes=DATASET // 4, lookahead_steps=4)
    source = TarShards(keys, s3_server.store(), index_dir=tmp_path, cache=cache)
    resumed = await _stream(DataLoader(source, sampler, _collate, seed=SEED), middle, 2 * steps)
    assert resumed == want[middle:]
    assert cache.statistics().planned_batches == 2 * steps - middle


def test_a_restart_reuses_the_disk_tier_with_no_get(
    s3_server: S3Info, s3_prefix: str, fault_proxy: LoopbackProxy, tmp_path: Path
) -> None:
    keys = upload(s3_server.store(), s3_prefix, BLOBS)
    store = s3_server.store(endpoint=fault_proxy.endpoint)
    sampler = samplers()["global"]
    index_dir, disk_dir = tmp_path / "index", tmp_path / "disk"
    TarShards(keys, store, index_dir=index_dir)  # saved indices: the cache starts empty
    first_cache = KnownFutureCache(
        DATASET // 8, disk_dir=disk_dir, disk_bytes=DATASET, lookahead_steps=4
    )
    first = LoggedShards(keys, store, index_dir=index_dir, cache=first_cache)
    got = run_epochs(first, sampler, 1)
    stats = first_cache.statistics()
    assert stats.disk_bytes == _sample_bytes(first)  # all of it on disk
    assert stats.disk_peak_bytes <= stats.disk_max_bytes
    assert stats.entries == N
    assert stats.memory_bytes_evicted > 0  # memory is smaller: it kept the soonest needed
    fault_proxy.clear()
    cache = KnownFutureCache(DATASET // 8, disk_dir=disk_dir, disk_bytes=DATASET)
    source = LoggedShards(keys, store, index_dir=index_dir, cache=cache)  # a new process
    again = run_epochs(source, sampler, 1)
    assert again.batches == got.batches == expected_batches(WANT, sampler, range(len(got.batches)))
    assert again.requests == [0]
    requests = fault_proxy.records()
    assert len(requests) == 1  # only the index check, one listing: no HEAD, no sample GET
    assert "list-type=2" in requests[0].path
    stats = cache.statistics()
    assert stats.memory_hits + stats.disk_hits == N
    assert stats.disk_hits > 0
    assert stats.misses == 0
    _identity(stats)


# -- without a server: argument errors, sharing reads, cancellation ----------------------


def _memory_source(cache: KnownFutureCache | None) -> TarShards[Any]:
    store = MemoryStore()
    keys = upload(store, "", BLOBS)
    return TarShards(keys, store, cache=cache)


def test_argument_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_bytes must be an integer >= 1 but got 0"):
        KnownFutureCache(0)
    with pytest.raises(ValueError, match="lookahead_steps must be an integer >= 0 but got -1"):
        KnownFutureCache(10, lookahead_steps=-1)
    with pytest.raises(ValueError, match="readahead_bytes must be an integer >= 0 but got -1"):
        KnownFutureCache(10, readahead_bytes=-1)
    with pytest.raises(ValueError, match="policy must be 'belady' or 'lru' but got 'fifo'"):
        KnownFutureCache(10, policy="fifo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="coalesce_gap must be an integer >= 0 but got -1"):
        KnownFutureCache(10, coalesce_gap=-1)
    with pytest.raises(ValueError, match="disk_dir and disk_bytes go together"):
        KnownFutureCache(10, disk_dir=tmp_path)
    with pytest.raises(ValueError, match="disk_dir and disk_bytes go together"):
        KnownFutureCache(10, disk_bytes=5)
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"disk_dir must be a folder but .* is a file"):
        KnownFutureCache(10, disk_dir=tmp_path / "file", disk_bytes=5)
    with pytest.raises(TypeError, match="disk_dir must be a str, a Path or None but got 5"):
        KnownFutureCache(10, disk_dir=5, disk_bytes=5)  # type: ignore[arg-type]
    cache = KnownFutureCache(10)
    with pytest.raises(TypeError, match="sampler must have steps_per_epoch"):
        cache.plan(object(), 0)
    source = _memory_source(cache)
    with pytest.raises(ValueError, match="already serves another source"):
        TarShards(list(source.shards), source.store, cache=cache)
    with pytest.raises(TypeError, match="cache must be a KnownFutureCache but got dict"):
        TarShards(list(source.shards), source.store, cache={})  # type: ignore[call-overload]


@pytest.mark.anyio
async def test_concurrent_batches_share_reads_and_unplanned_reads_still_work() -> None:
    cache = KnownFutureCache(DATASET, lookahead_steps=8)
    source = _memory_source(None)
    source = TarShards(list(source.shards), source.store, cache=cache, index_dir=None)
    sampler = SequentialSampler(N, BATCH)
    cache.plan(sampler, 0, 0)
    results: dict[int, list[Any]] = {}

    async def read(step: int) -> None:
        got = await source.get_samples(sampler.indices(0, 0, step).tolist())
        results[step] = [sample["bin"] for sample in got]

    async with anyio.create_task_group() as group:
        for step in range(8):
            group.start_soon(read, step)
    assert [results[s] for s in range(8)] == [WANT[s * BATCH : (s + 1) * BATCH] for s in range(8)]
    stats = cache.statistics()
    assert stats.misses + stats.hits == 8 * BATCH
    got = await source.get_samples([N - 1, 3, 3])  # not a step of the plan
    assert [sample["bin"] for sample in got] == [WANT[N - 1], WANT[3], WANT[3]]
    assert (await source.get_sample(N - 2))["bin"] == WANT[N - 2]
    assert cache.statistics().planned_batches == 8
    _identity(cache.statistics())


@pytest.mark.anyio
async def test_cancelling_a_read_in_flight_leaves_a_consistent_cache(
    s3_server: S3Info, s3_prefix: str, fault_proxy: LoopbackProxy, tmp_path: Path
) -> None:
    keys = upload(s3_server.store(), s3_prefix, BLOBS)
    store = s3_server.store(endpoint=fault_proxy.endpoint)
    TarShards(keys, store, index_dir=tmp_path)
    cache = KnownFutureCache(DATASET, lookahead_steps=4)
    source = TarShards(keys, store, cache=cache, index_dir=tmp_path)  # nothing offered
    assert cache.statistics().entries == 0
    sampler = SequentialSampler(N, BATCH)
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
    assert (stats.entries, stats.current_bytes, stats.readahead_bytes) == (0, 0, 0)
    assert reader.statistics().in_flight == 0
    fault_proxy.clear()
    # the same batch again (now unplanned: step 0 was consumed) and the next ones read fine
    for step in range(3):
        got = await source.get_samples(sampler.indices(0, 0, step).tolist())
        assert [sample["bin"] for sample in got] == WANT[step * BATCH : (step + 1) * BATCH]
    _identity(cache.statistics())


def test_building_the_index_fills_the_cache() -> None:
    cache = KnownFutureCache(DATASET, lookahead_steps=4)
    source = _memory_source(cache)  # the index is built: every byte was read
    indexing = source.statistics()
    assert indexing is not None
    assert indexing.requests == SHARDS  # one ranged GET per shard (HEADs are not counted)
    assert cache.statistics().entries == N
    sampler = ShuffledSampler(N, BATCH)
    cache.plan(sampler, 4, 0)

    async def two_epochs() -> None:
        for g in range(2 * sampler.steps_per_epoch):
            await source.get_samples(sampler.indices(4, g // 48, g % 48).tolist())

    anyio.run(two_epochs)
    after = source.statistics()
    assert after is not None
    assert after.requests == indexing.requests  # two epochs without a request
    assert cache.statistics().requests == 0


def test_belady_keeps_a_stable_subset_where_lru_thrashes(tmp_path: Path) -> None:
    store = MemoryStore()
    keys = upload(store, "", BLOBS)
    probe = TarShards(keys, store, index_dir=tmp_path)
    rates = {}
    for policy in ("belady", "lru"):
        cache = KnownFutureCache(
            _sample_bytes(probe) // 4, readahead_bytes=0, lookahead_steps=0, policy=policy
        )
        source = LoggedShards(keys, store, cache=cache, index_dir=tmp_path)
        run_epochs(source, ShuffledSampler(N, BATCH), 4)
        rates[policy] = cache.statistics().hit_rate
    print(
        f"25% cache, global shuffle, 4 epochs: hit rate belady {rates['belady']:.3f} "
        f"lru {rates['lru']:.3f}"
    )
    assert rates["belady"] >= 0.18  # a quarter of the data, hit once an epoch from epoch 2
    assert rates["belady"] >= 2 * rates["lru"]
