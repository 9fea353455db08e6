"""What indexing remote shards keeps for the cache: within the cache's bound, in shard order."""

from __future__ import annotations

import io
import tarfile
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import obstore
import pytest

from aioloader import MalformedShardError
from aioloader.sources._tar import TarShards
from aioloader.sources._tar_index import TarSampleEntry
from aioloader.sources._tar_keep import KeepBudget, KeptShard, sample_bytes
from aioloader.sources.cache import KnownFutureCache
from tests._support.s3 import S3Info

PER_SHARD = 8
SAMPLE = 120_000  # 8 samples and their headers: a shard of about 0.93 MiB
BOUND = 2 << 20


def _shard(number: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for i in range(PER_SHARD):
            info = tarfile.TarInfo(f"s{number:02d}/{i}.bin")
            info.size = SAMPLE
            archive.addfile(info, io.BytesIO(bytes([(number * PER_SHARD + i) % 251]) * SAMPLE))
    return buffer.getvalue()


@pytest.mark.parametrize(("shards", "threads"), [(16, 1), (32, 4)])
def test_indexing_with_a_cache_holds_its_bound_plus_the_shards_in_flight(
    s3_server: S3Info, s3_prefix: str, shards: int, threads: int
) -> None:
    store = s3_server.store()
    keys = [f"{s3_prefix}shard-{s:02d}.tar" for s in range(shards)]
    for s, key in enumerate(keys):
        obstore.put(store, key, _shard(s))
    shard_bytes = len(_shard(0))
    assert shard_bytes == 972_800  # 8 x (512 + 120,320) + end blocks, in 10,240-byte records
    cache = KnownFutureCache(BOUND)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        source = TarShards(keys, store, cache=cache, index_threads=threads)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    # the cache's bound, plus a shard per indexing thread (streamed, or being cut into its
    # samples), plus 10% for the indices and the objects around them; whatever the number of
    # shards (all of them kept and collected first peaked at 16-32 MiB here)
    assert peak <= BOUND + threads * shard_bytes + BOUND // 10, peak
    stats = cache.statistics()
    # two shards fit the bound (1,945,600 bytes reserved), a third does not: nothing more kept
    assert (stats.entries, stats.current_bytes) == (2 * PER_SHARD, 2 * PER_SHARD * SAMPLE)
    indexing = source.statistics()
    assert indexing is not None
    assert indexing.requests == shards  # still one GET per shard
    if threads == 1:  # in order: the first two shards are the ones kept
        got = anyio.run(source.get_samples, list(range(2 * PER_SHARD)))
        assert [sample["bin"] for sample in got] == [bytes([i]) * SAMPLE for i in range(16)]
        after = source.statistics()
        assert after is not None
        assert after.requests == shards  # served from what indexing kept


def _small_shard(tag: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for i in range(3):
            info = tarfile.TarInfo(f"{i}.bin")
            info.size = 100
            archive.addfile(info, io.BytesIO(bytes([tag * 3 + i]) * 100))
    return buffer.getvalue()


def _put(store: Any, prefix: str, shards: dict[str, bytes]) -> list[str]:
    for name, data in shards.items():
        obstore.put(store, prefix + name, data)
    return [prefix + name for name in shards]


def test_a_source_that_fails_to_build_leaves_nothing_in_the_cache(
    s3_server: S3Info, s3_prefix: str
) -> None:
    store = s3_server.store()
    good = _put(store, s3_prefix, {"a.tar": _small_shard(0), "b.tar": _small_shard(1)})
    (bad,) = _put(store, s3_prefix, {"bad.tar": b"not a tar archive" * 64})
    cache = KnownFutureCache(1 << 20)
    with pytest.raises(MalformedShardError, match=r"bad\.tar"):
        TarShards([*good, bad], store, cache=cache, index_threads=1)
    assert (cache.statistics().entries, cache.statistics().current_bytes) == (0, 0)
    swapped = TarShards(good[::-1], store, cache=cache)  # samples 0-2 are b's now
    assert cache.statistics().entries == 6
    got = anyio.run(swapped.get_samples, list(range(6)))
    assert [sample["bin"][0] for sample in got] == [3, 4, 5, 0, 1, 2]


def test_a_cache_serving_another_source_is_not_offered_its_samples(
    s3_server: S3Info, s3_prefix: str, tmp_path: Path
) -> None:
    store = s3_server.store()
    first = _put(store, s3_prefix, {"a.tar": _small_shard(0)})
    other = _put(store, s3_prefix, {"b.tar": _small_shard(1)})
    TarShards(first, store, index_dir=tmp_path)
    cache = KnownFutureCache(1 << 20)
    source = TarShards(first, store, index_dir=tmp_path, cache=cache)  # nothing offered
    assert cache.statistics().entries == 0
    with pytest.raises(ValueError, match="already serves another source"):
        TarShards(other, store, cache=cache)  # indexed on the fly: it offered, then took back
    assert cache.statistics().entries == 0
    got = anyio.run(source.get_samples, [0, 1, 2])
    assert [sample["bin"] for sample in got] == [bytes([i]) * 100 for i in range(3)]
    held = cache.statistics().entries
    with pytest.raises(ValueError, match="already serves another source"):
        TarShards(other, store, cache=cache)  # a cache holding samples is offered none
    assert cache.statistics().entries == held


def test_sample_bytes_are_cut_from_contiguous_chunks_only() -> None:
    shard = bytes(range(40))
    chunks = {0: shard[:10], 10: shard[10:25], 30: shard[30:40]}  # bytes 25-30 never read
    entries = [
        TarSampleEntry("inside", (("a", 2, 5),)),
        TarSampleEntry("across", (("a", 8, 4), ("b", 14, 6))),
        TarSampleEntry("gap", (("a", 24, 3),)),
        TarSampleEntry("empty", (("a", 31, 0),)),
        TarSampleEntry("last", (("a", 35, 5),)),
        TarSampleEntry("past", (("a", 38, 4),)),
    ]
    assert sample_bytes(entries, chunks) == (
        shard[2:7],
        shard[8:20],
        None,
        None,
        shard[35:40],
        None,
    )


def test_the_budget_keeps_within_the_cache_room_and_stops_at_the_first_refusal() -> None:
    cache = KnownFutureCache(100)
    budget = KeepBudget(cache)
    assert budget.reserve(60)
    assert not budget.reserve(41)  # 101 > 100: not kept, nothing counted
    assert budget.reserve(40)
    assert budget.held == 100
    budget.release(10)  # the first shard is cut into 50 bytes of samples
    budget.offer(0, KeptShard((b"x" * 30, None, b"y" * 20), 50))
    assert budget.held == 90  # the cache took 50; the second shard still holds 40
    budget.release(10)
    budget.offer(3, KeptShard((b"z" * 20, b"w" * 10), 30))
    assert budget.held == 80
    assert (cache.statistics().entries, cache.statistics().current_bytes) == (4, 80)
    assert cache.offer(99, b"q" * 5)  # room the budget does not know of is taken
    assert budget.reserve(20)
    budget.offer(5, KeptShard((b"v" * 10, b"u" * 10), 20))  # the second is refused: 105 > 100
    assert budget.held == 90  # the 10 bytes taken count; keeping has ended
    assert not budget.reserve(1)
    assert (cache.statistics().entries, cache.statistics().current_bytes) == (6, 95)
    assert not KeepBudget(cache).reserve(1)  # a cache that holds samples is offered none
