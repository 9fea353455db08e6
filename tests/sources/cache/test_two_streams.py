"""One KnownFutureCache, two streams: a training stream and an evaluation stream take turns
over the same TarShards, each with its own plan, and neither destroys the other's; one
cache of S fetches no more bytes than two caches of S/2, one a stream, at any S."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from obstore.store import MemoryStore

from aioloader.core import SequentialSampler, ShuffledSampler, digest_stream, plan_batch
from aioloader.engine import DataLoader
from aioloader.sources._tar import TarShards
from aioloader.sources.cache import KnownFutureCache
from tests._support.s3 import S3Info
from tests.sources.cache.helpers import (
    BATCH,
    PER_SHARD,
    SEED,
    LoggedShards,
    shard_blobs,
    upload,
    want_of,
)

BLOBS = shard_blobs()
WANT = want_of(BLOBS)
DATASET = sum(len(blob) for blob in BLOBS)
TRAIN_SHARDS = 20
TRAIN = TRAIN_SHARDS * PER_SHARD  # samples 0..639 train, 640..767 evaluate
BACKENDS = ["asyncio", "trio"]


class Offset:
    """``sampler`` over the samples from ``offset`` on (the evaluation split)."""

    def __init__(self, sampler: Any, offset: int) -> None:
        self.sampler, self.offset = sampler, offset

    @property
    def steps_per_epoch(self) -> int:
        return int(self.sampler.steps_per_epoch)

    def indices(self, seed: int, epoch: int, step: int) -> Any:
        return self.sampler.indices(seed, epoch, step) + self.offset


def _train() -> ShuffledSampler:
    return ShuffledSampler(TRAIN, BATCH)


def _evaluate() -> Offset:
    return Offset(SequentialSampler(len(WANT) - TRAIN, BATCH), TRAIN)


EVERY = 20  # an evaluation pass after every 20 training steps
EPOCHS = 3  # of training (40 steps each): 6 evaluation passes of 8 steps


def _schedule() -> list[tuple[str, int, int]]:
    """``(stream, first step, stop)`` of each stretch, in the order they run: a training
    epoch is one stream (``async for``), each evaluation pass another."""
    train_steps, evaluate_steps = _train().steps_per_epoch, _evaluate().steps_per_epoch
    out: list[tuple[str, int, int]] = []
    passes = 0
    for epoch in range(EPOCHS):
        for first in range(epoch * train_steps, (epoch + 1) * train_steps, EVERY):
            out.append(("train", first, min(first + EVERY, (epoch + 1) * train_steps)))
            out.append(("evaluate", passes * evaluate_steps, (passes + 1) * evaluate_steps))
            passes += 1
    return out


def _run(
    sources: dict[str, LoggedShards], backend: str, plan: bool = True
) -> dict[str, list[list[bytes]]]:
    """Read the schedule, each stream through its source; plan as the loader does (in a
    worker thread, when a stream starts; a training epoch's stream spans its stretches)."""
    samplers: dict[str, Any] = {"train": _train(), "evaluate": _evaluate()}
    batches: dict[str, list[list[bytes]]] = {"train": [], "evaluate": []}

    async def main() -> None:
        for name, first, stop in _schedule():
            sampler, source = samplers[name], sources[name]
            steps = sampler.steps_per_epoch
            if plan and first % steps == 0:  # a stream starts: the epoch (or the pass)
                await anyio.to_thread.run_sync(
                    source.plan_reads, sampler, SEED, first, first + steps
                )
            for g in range(first, stop):
                got = await source.get_samples(plan_batch(sampler, SEED, g).indices.tolist())
                batches[name].append([sample["bin"] for sample in got])

    anyio.run(main, backend=backend)
    return batches


def _fetched(source: LoggedShards) -> int:
    return sum(end - start for _, start, end in source.log)


def _compare(
    keys: list[str], store: Any, index_dir: Path, size: int, backend: str
) -> tuple[list[int], int]:
    """Bytes fetched by two caches of ``size // 2`` (one a stream) and by one of ``size``
    (both streams), over the schedule; checks the batches and the shared cache's counts."""
    options: dict[str, Any] = {"readahead_bytes": 2 * DATASET // 24, "lookahead_steps": 4}
    plain = LoggedShards(keys, store, index_dir=index_dir)
    without = _run({"train": plain, "evaluate": plain}, backend, plan=False)

    halves = [KnownFutureCache(size // 2, **options) for _ in range(2)]
    apart = [LoggedShards(keys, store, index_dir=index_dir, cache=half) for half in halves]
    separate = _run({"train": apart[0], "evaluate": apart[1]}, backend)

    cache = KnownFutureCache(size, **options)
    shared = LoggedShards(keys, store, index_dir=index_dir, cache=cache)
    together = _run({"train": shared, "evaluate": shared}, backend)

    for got in (separate, together):  # the batches are those read without a cache
        assert digest_stream(got["train"]) == digest_stream(without["train"])
        assert digest_stream(got["evaluate"]) == digest_stream(without["evaluate"])
    assert len(together["train"]) == EPOCHS * _train().steps_per_epoch
    assert len(together["evaluate"]) == 2 * EPOCHS * _evaluate().steps_per_epoch
    stats = cache.statistics()
    assert stats.bytes_fetched == _fetched(shared)
    # every batch of both streams was found in its stream's plan: neither replaced the other
    assert stats.planned_batches == len(together["train"]) + len(together["evaluate"])
    assert stats.bytes_dropped == stats.bytes_waiting == 0  # every read-ahead byte was used
    assert stats.planned_streams == 0  # every stream ran to its stop and unregistered
    assert stats.peak_bytes <= size
    return [_fetched(source) for source in apart], _fetched(shared)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_cache_serves_two_streams_for_no_more_bytes_than_two_caches_of_half_the_size(
    s3_server: S3Info, s3_prefix: str, tmp_path: Path, backend: str
) -> None:
    keys = upload(s3_server.store(), s3_prefix, BLOBS)
    store = s3_server.store()
    TarShards(keys, store, index_dir=tmp_path)  # saved indices: every cache starts empty
    apart, shared = _compare(keys, store, tmp_path, DATASET // 2, backend)
    # exact bytes (the same on asyncio and trio): one cache of S fetches no more than two
    # of S/2, one a stream (and fewer: its room goes where the plans need it)
    assert apart == [12_538_097, 1_113_011]
    assert shared == 12_175_606 <= sum(apart)


# (cache as a share of the data, bytes fetched by two caches of half of it, by one cache)
SIZES = [
    (4, [14_466_335, 2_028_296], 16_349_805),
    (2, [12_538_097, 1_113_011], 12_175_606),
    (4 / 3, [10_698_684, 1_113_011], 8_443_244),
    (1, [8_854_270, 1_113_011], 6_468_796),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("part", "two", "one"), SIZES, ids=["1/4", "1/2", "3/4", "1"])
def test_one_cache_fetches_no_more_than_two_half_caches_at_any_size(
    tmp_path: Path, backend: str, part: float, two: list[int], one: int
) -> None:
    """A quarter of the data up to all of it (an in-memory store: the same bytes as S3).
    At a quarter, each stream alone wants more than half the cache: the evaluation pass's
    entries are ranked by its next pass (not as never needed again), so training's
    read-ahead leaves them; the evaluation data stays whole and training gets the rest."""
    store = MemoryStore()
    keys = upload(store, "", BLOBS)
    TarShards(keys, store, index_dir=tmp_path)  # saved indices: every cache starts empty
    apart, shared = _compare(keys, store, tmp_path, int(DATASET / part), backend)
    assert apart == two
    assert shared == one <= sum(apart)


def _want(sampler: Any, steps: range) -> list[list[bytes]]:
    return [[WANT[i] for i in plan_batch(sampler, SEED, g).indices.tolist()] for g in steps]


def _collate(samples: Any) -> list[bytes]:
    return [sample["bin"] for sample in samples]


@pytest.mark.anyio
async def test_each_stream_keeps_its_own_plan_until_it_ends_or_is_unplanned() -> None:
    cache = KnownFutureCache(DATASET // 4, lookahead_steps=4)
    store = MemoryStore()
    source = TarShards(upload(store, "", BLOBS), store, cache=cache)
    train, evaluate = _train(), _evaluate()
    passes = evaluate.steps_per_epoch

    async def read(sampler: Any, steps: range) -> None:
        for g in steps:
            got = await source.get_samples(plan_batch(sampler, SEED, g).indices.tolist())
            assert [[sample["bin"] for sample in got]] == _want(sampler, range(g, g + 1))

    def streams() -> tuple[int, int]:
        stats = cache.statistics()
        return stats.planned_streams, stats.planned_batches

    await anyio.to_thread.run_sync(source.plan_reads, train, SEED, 0)  # no stop: runs on
    await anyio.to_thread.run_sync(source.plan_reads, evaluate, SEED, 0, passes)
    assert streams() == (2, 0)
    await read(train, range(3))
    await read(evaluate, range(passes))
    assert streams() == (1, 3 + passes)  # evaluation reached its stop: its plan went
    await read(train, range(3, 6))  # training's plan survived the other stream's
    assert streams() == (1, 6 + passes)
    await anyio.to_thread.run_sync(source.plan_reads, train, SEED, 10)  # the same stream
    assert streams() == (1, 6 + passes)  # replaced its own plan, added none
    assert cache.plan(evaluate, SEED, passes, 2 * passes, stream="eval") == "eval"
    assert streams() == (2, 6 + passes)
    await read(train, range(10, 12))
    assert streams() == (2, 8 + passes)
    assert cache.unplan("eval") is True
    assert cache.unplan("eval") is False
    await read(evaluate, range(passes, passes + 1))  # read fine, unplanned
    assert streams() == (1, 8 + passes)


@pytest.mark.anyio
async def test_two_loaders_take_turns_over_one_cache_each_planned_by_the_engine(
    s3_server: S3Info, s3_prefix: str, tmp_path: Path
) -> None:
    keys = upload(s3_server.store(), s3_prefix, BLOBS)
    store = s3_server.store()
    TarShards(keys, store, index_dir=tmp_path)
    cache = KnownFutureCache(DATASET // 2, readahead_bytes=2 * DATASET // 24, lookahead_steps=4)
    source = TarShards(keys, store, index_dir=tmp_path, cache=cache)
    train: DataLoader[Any, Any] = DataLoader(
        source, _train(), _collate, seed=SEED, prefetch=4, workers=2
    )
    evaluate: DataLoader[Any, Any] = DataLoader(
        source, _evaluate(), _collate, seed=SEED, prefetch=4
    )
    steps, passes = _train().steps_per_epoch, _evaluate().steps_per_epoch
    trained: list[Any] = []
    evaluated: list[Any] = []
    async with train.stream(0, 2 * steps) as batches:  # open (prefetching) while evaluating
        async for batch in batches:
            trained.append(batch)
            if len(trained) % EVERY == 0:
                first = len(evaluated)
                async with evaluate.stream(first, first + passes) as others:
                    evaluated.extend([other async for other in others])
    assert trained == _want(_train(), range(2 * steps))
    assert evaluated == _want(_evaluate(), range(len(evaluated)))
    assert len(evaluated) == 2 * steps // EVERY * passes
    stats = cache.statistics()
    assert stats.planned_batches == len(trained) + len(evaluated)  # each in its own plan
    assert stats.planned_streams == 0
    assert stats.peak_bytes <= stats.max_bytes
