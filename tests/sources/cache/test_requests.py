"""Requests per epoch on SeaweedFS, shards of 128 samples: a few per shard at any cache size.

W8's shape with small samples (32 shards of 128 samples of 1-4 KB, batch 64, a block shuffle of
window 4: a group of four shards read over eight steps), three epochs of one stream each,
as ``async for`` makes them, read step after step. The cache's default lookahead and
horizon; a request costs about four samples' bytes (``coalesce_gap``), as 256 KiB does for
W8's 66 KB images. The counts are exact: every choice is a function of the plan and of what
the cache holds at the step, never of timing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from aioloader.core import BlockShuffledSampler, ShuffledSampler, plan_batch
from aioloader.engine import DataLoader
from aioloader.sources._tar import TarShards
from aioloader.sources.cache import KnownFutureCache
from tests._support.s3 import S3Info
from tests.sources.cache.helpers import SEED, LoggedShards, run_epochs, shard_blobs, upload

SHARDS, PER_SHARD, BATCH = 32, 128, 64
GAP = 10_000
"""About four samples: what a request costs here, in bytes."""


BLOBS = shard_blobs(SHARDS, PER_SHARD, seed=35, sizes=(1000, 4000))


def _sampler(kind: str) -> Any:
    if kind == "block":
        return BlockShuffledSampler([PER_SHARD] * SHARDS, BATCH, window=4, drop_last=True)
    return ShuffledSampler(SHARDS * PER_SHARD, BATCH)


# (sampler, cache as a share of the sample bytes): requests in epochs 1, 2, 3 (fa101f8:
# block [32, 810, 420], [32, 319, 316], [32, 0, 0]; global [1952, 1974, 1971],
# [1551, 1136, 1094], [1551, 0, 0]; 4777ab2, before whole runs at need displaced kept
# entries: global [2668, 1976, 2001], [2184, 1345, 1351])
REQUESTS = {
    ("block", 0.25): [32, 26, 31],
    ("block", 0.5): [32, 18, 20],
    ("block", 1.0): [32, 0, 0],
    ("global", 0.25): [1780, 1707, 1551],
    ("global", 0.5): [1440, 982, 953],
    ("global", 1.0): [1458, 0, 0],
}


@pytest.mark.parametrize(("kind", "fraction"), list(REQUESTS), ids=str)
def test_requests_per_epoch_at_a_quarter_half_and_all_of_the_data(
    s3_server: S3Info, s3_prefix: str, tmp_path: Path, kind: str, fraction: float
) -> None:
    keys = upload(s3_server.store(), s3_prefix, BLOBS)
    probe = TarShards(keys, s3_server.store(), index_dir=tmp_path)  # the cache starts empty
    data = sum(end - start for _, start, end in map(probe.span_of, range(len(probe))))
    cache = KnownFutureCache(int(data * fraction), coalesce_gap=GAP)
    source = LoggedShards(keys, s3_server.store(), index_dir=tmp_path, cache=cache)
    got = run_epochs(source, _sampler(kind), 3, per_epoch=True)
    assert got.requests == REQUESTS[kind, fraction]
    if kind == "block":  # at most two requests a shard, each sample fetched once for its use
        assert max(got.requests) <= 2 * SHARDS
    assert max(got.used) <= data
    assert got.fetched[0] <= sum(map(len, BLOBS))  # epoch 1: no byte of a shard twice


# A group as large as the cache (W6's shape, 4 x 16 MB against 59 MB): 16 shards of 256
# samples, a group of four read over 16 steps. Requests in epochs 1, 2, 3 (169adfb, before
# a run at need kept the samples needed soon after the step it is read for, not after the
# step being read: 25% [115, 210, 232]; at a128d62, before a plan started with two windows:
# 25% [33, 30, 35]). Not yet few: epoch 3 at 25% and epoch 2 at 50%, where shards are partly
# held and the samples missing between held ones are read a few a request at need (a run
# passes over held bytes only up to a quarter of its own: ``_room.PASS_OVER``).
LARGE_SHARDS, LARGE_PER_SHARD = 16, 256
LARGE_BLOBS = shard_blobs(LARGE_SHARDS, LARGE_PER_SHARD, seed=36, sizes=(1000, 4000))
LARGE_REQUESTS = {0.25: [33, 30, 68], 0.5: [16, 103, 23]}


@pytest.mark.parametrize("fraction", list(LARGE_REQUESTS), ids=str)
def test_requests_per_epoch_when_a_group_is_as_large_as_the_cache(
    s3_server: S3Info, s3_prefix: str, tmp_path: Path, fraction: float
) -> None:
    keys = upload(s3_server.store(), s3_prefix, LARGE_BLOBS)
    probe = TarShards(keys, s3_server.store(), index_dir=tmp_path)
    data = sum(end - start for _, start, end in map(probe.span_of, range(len(probe))))
    cache = KnownFutureCache(int(data * fraction), coalesce_gap=GAP)
    source = LoggedShards(keys, s3_server.store(), index_dir=tmp_path, cache=cache)
    sizes = [LARGE_PER_SHARD] * LARGE_SHARDS
    sampler = BlockShuffledSampler(sizes, BATCH, window=4, drop_last=True)
    got = run_epochs(source, sampler, 3, per_epoch=True)
    assert got.requests == LARGE_REQUESTS[fraction]
    assert got.fetched[0] <= sum(map(len, LARGE_BLOBS))  # epoch 1: no byte of a shard twice
    assert max(got.used) <= data


def _count(samples: Sequence[Any]) -> int:
    return len(samples)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["block", "global"])
async def test_a_stream_resumed_at_three_quarters_reads_nothing_its_epoch_already_used(
    s3_server: S3Info, s3_prefix: str, tmp_path: Path, kind: str
) -> None:
    keys = upload(s3_server.store(), s3_prefix, BLOBS)
    TarShards(keys, s3_server.store(), index_dir=tmp_path)  # the cache starts empty
    cache = KnownFutureCache(sum(map(len, BLOBS)) // 4, coalesce_gap=GAP)
    source = LoggedShards(keys, s3_server.store(), index_dir=tmp_path, cache=cache)
    sampler = _sampler(kind)
    steps = sampler.steps_per_epoch
    middle = 3 * steps // 4
    loader: DataLoader[Any, int] = DataLoader(source, sampler, _count, seed=SEED)
    async with loader.stream(middle, steps) as batches:
        sizes = [size async for size in batches]
    assert sizes == [BATCH] * (steps - middle)
    carried = {u for key, start, end in source.log for u in source.indices_within(key, start, end)}
    after = {int(i) for g in range(middle, steps) for i in plan_batch(sampler, SEED, g).indices}
    assert carried == after  # every sample the rest of the epoch uses, and no other
