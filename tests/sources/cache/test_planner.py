"""HorizonPlanner: next uses and matching against brute force; bounds at ImageNet size."""

from __future__ import annotations

import tracemalloc
from typing import Any

import numpy as np
import pytest

from aioloader.core import BlockShuffledSampler, SequentialSampler, ShuffledSampler
from aioloader.sources.cache import NEVER, HorizonPlanner, KnownFutureCache


def _planner(sampler: object, start: int = 0) -> HorizonPlanner:
    return HorizonPlanner(sampler, 3, start, window_steps=4, windows=3, slack=8)


def test_next_use_and_match_agree_with_the_sampler() -> None:
    sampler = ShuffledSampler(50, 5)  # 10 steps an epoch: the horizon crosses epochs
    planner = _planner(sampler, start=6)
    planner.fill()
    assert planner.planned_until == 6 + 12
    for step in range(6, 18):
        epoch, in_epoch = divmod(step, 10)
        batch = sampler.indices(3, epoch, in_epoch).tolist()
        assert planner.step_indices(step).tolist() == batch
        assert planner.match(batch) == step
        for unit in range(50):
            later = [
                s for s in range(step, 18) if unit in sampler.indices(3, s // 10, s % 10).tolist()
            ]
            assert planner.next_use(unit) == (later[0] if later else NEVER)
        planner.consume(step)
        assert planner.match(batch) is None  # read already
    assert planner.cursor == 18
    assert planner.wanted_window() == 18


def test_steps_read_out_of_order_and_skipped_steps() -> None:
    sampler = SequentialSampler(40, 4)
    planner = _planner(sampler)
    planner.fill()
    planner.consume(1)
    assert planner.cursor == 0
    assert planner.next_use(5) == 11  # step 1 read it; epoch 1 reads it again at step 11
    assert planner.next_use(0) == 0
    planner.consume(0)
    assert planner.cursor == 2
    planner.consume(11)  # step 2 is more than ``slack`` (8) behind: never coming
    assert planner.cursor == 3
    assert planner.next_use(8) == NEVER  # step 2 was given up, step 12 is not planned
    assert planner.next_use(12) == 3
    assert planner.match([100, 101]) is None
    assert planner.match([]) is None


def test_a_stale_horizon_is_not_installed() -> None:
    planner = _planner(SequentialSampler(40, 4))
    first = planner.extend(0)
    assert planner.install(first) == list(range(16))
    stale = planner.extend(4)
    planner.install(planner.extend(4))  # another extension won the race
    assert planner.install(stale) == []
    assert planner.planned_until == 8


class _Counting:
    """A sampler that records the steps it was asked for."""

    def __init__(self, sampler: Any) -> None:
        self._sampler = sampler
        self.asked: list[tuple[int, int]] = []

    @property
    def steps_per_epoch(self) -> int:
        return int(self._sampler.steps_per_epoch)

    def indices(self, seed: int, epoch: int, step: int) -> Any:
        self.asked.append((epoch, step))
        return self._sampler.indices(seed, epoch, step)


SIZES = [1_281_167 // 1_024 + (1 if k < 1_281_167 % 1_024 else 0) for k in range(1_024)]


@pytest.mark.parametrize(
    "sampler",
    [ShuffledSampler(1_281_167, 256), BlockShuffledSampler(SIZES, 256, window=4)],
    ids=["global", "block"],
)
def test_planning_at_imagenet_size_stays_within_its_bounds(sampler: object) -> None:
    cache = KnownFutureCache(1 << 30, lookahead_steps=16)
    counting = _Counting(sampler)
    cache.plan(counting, 0, 0)
    # planning costs two windows of steps (32: the lookahead and a window more, so that the
    # first step's read-ahead knows every step it reads for), whatever the epoch's length
    # (5,005 steps): the later windows are computed as the reads move on
    # (benchmarks/micro/bench_planner.py measures the time)
    assert counting.asked == [(0, step) for step in range(32)]
    tracemalloc.start()
    try:
        planner = HorizonPlanner(sampler, 0, 0, window_steps=16, windows=4, slack=256)
        planner.fill()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 64 << 20
    assert planner.planned_until == 64
    assert planner.nbytes <= 4 << 20  # O(horizon x batch), nothing per sample of the data
    assert cache.statistics().planner_bytes <= 2 << 20
    batch = np.asarray(planner.step_indices(63))
    assert planner.match(batch.tolist()) == 63
