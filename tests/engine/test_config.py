"""LoaderConfig, LoaderCounters, ResumeCursor: what a loader hands the parts of its streams."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aioloader.core import SequentialSampler, plan_batch
from aioloader.engine._config import LoaderConfig, LoaderCounters, ResumeCursor
from aioloader.engine._reads import ReadBound
from aioloader.engine._stream import BatchStream
from aioloader.engine._work import StreamWork
from aioloader.testing import MemoryDataset, StackCollator

from .helpers import make_samples


def _config(sampler: object, length: int | None = 8) -> LoaderConfig:
    return LoaderConfig(
        dataset=MemoryDataset(make_samples(8)),
        sampler=sampler,  # type: ignore[arg-type]
        collator=StackCollator(),
        transform=None,
        takes_rng=False,
        seed=5,
        dataset_length=length,
        workers=0,
        requested_workers=0,
        executor="thread",
        prefetch=2,
        max_inflight_reads=4,
    )


def test_the_config_is_frozen_and_plans_steps() -> None:
    sampler = SequentialSampler(8, 4)
    config = _config(sampler)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.prefetch = 3  # type: ignore[misc]
    plan = config.plan(3)
    assert plan.indices.tolist() == plan_batch(sampler, 5, 3).indices.tolist() == [4, 5, 6, 7]


def test_the_config_checks_a_plan_against_the_dataset() -> None:
    class Beyond:
        steps_per_epoch = 1

        def indices(self, seed: int, epoch: int, step: int) -> np.ndarray:
            return np.array([0, 9], dtype=np.int64)

    with pytest.raises(IndexError, match=r"must be in \[0, len\(dataset\)\) = \[0, 8\) .* gave 9"):
        _config(Beyond()).plan(0)
    assert _config(Beyond(), length=None).plan(0).indices.tolist() == [0, 9]


class _Work:
    def __init__(self, reads: int) -> None:
        self.bound = ReadBound(4)
        self.bound.total = reads

    def cancel(self) -> None:
        raise AssertionError("not cancelled here")

    async def wait_ended(self) -> None:
        raise AssertionError("not awaited here")


def test_counters_move_an_ended_works_reads_into_the_total() -> None:
    counters = LoaderCounters()
    first, second = _Work(3), _Work(5)
    counters.work_started(first)
    counters.work_started(second)
    assert counters.running == {first, second}
    counters.work_ended(first)
    assert (counters.running, counters.reads_total, first.bound.total) == ({second}, 3, 0)
    counters.work_ended(second)
    assert (counters.running, counters.reads_total) == (set(), 8)


@pytest.mark.anyio
async def test_a_stream_advances_only_the_cursor_it_is_given() -> None:
    config = _config(SequentialSampler(8, 4))
    counters = LoaderCounters()
    cursor = ResumeCursor(0)
    moving: BatchStream[object] = BatchStream(StreamWork(config, counters, 0, 2), cursor)
    async with moving:
        assert moving.moves_cursor
        async for _ in moving:
            pass
    assert cursor.step == 2
    fixed: BatchStream[object] = BatchStream(StreamWork(config, counters, 0, 1), None)
    async with fixed:
        assert not fixed.moves_cursor
        async for _ in fixed:
            pass
    assert cursor.step == 2
    assert (counters.batches_delivered, counters.batches_built) == (3, 3)
