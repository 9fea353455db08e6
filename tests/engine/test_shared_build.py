"""aioloader.engine._shared_build: the step the consumer waits for is split among idle
threads into the same batch, errors are those of the lowest failing slot, and while it
reads a later step leaves a thread free for it."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import anyio
import numpy as np
import pytest

from aioloader import takes_rng
from aioloader.core import BatchPlan, SampleRng, ShuffledSampler, plan_batch, takes_plan
from aioloader.engine._build import TRANSFORM_SLOT, build_batch
from aioloader.engine._config import LoaderConfig
from aioloader.engine._shared_build import SPLIT_WORTH_SECONDS, SharedBuilds
from aioloader.engine._threads import BuildThreads

pytestmark = pytest.mark.anyio

SIZE = 12
SAMPLER = ShuffledSampler(96, SIZE)


@takes_rng
def noisy(sample: np.ndarray, rng: SampleRng) -> np.ndarray:
    return sample * 1000 + rng.next_int(1000)


@takes_plan
def stacked(samples: Sequence[np.ndarray], plan: BatchPlan) -> np.ndarray:
    return np.stack(samples) + plan.global_step


def config(transform: Any = noisy, collator: Any = stacked) -> LoaderConfig:
    return LoaderConfig(
        dataset=None,
        sampler=SAMPLER,
        collator=collator,
        transform=transform,
        takes_rng=True,  # every transform here is marked @takes_rng
        seed=7,
        dataset_length=96,
        workers=2,
        requested_workers=2,
        executor="thread",
        prefetch=4,
        max_inflight_reads=64,
    )


def step(global_step: int) -> tuple[BatchPlan, list[np.ndarray]]:
    plan = plan_batch(SAMPLER, 7, global_step)
    return plan, [np.array([int(index)]) for index in plan.indices]


async def test_the_awaited_step_splits_among_idle_threads_into_the_same_batch() -> None:
    threads = BuildThreads(3)
    used: set[str] = set()

    @takes_rng
    def marking(sample: np.ndarray, rng: SampleRng) -> np.ndarray:
        used.add(threading.current_thread().name)
        return noisy(sample, rng)

    builds = SharedBuilds(config(marking), threads, lambda: 4, 4)
    assert builds.parts(SIZE, awaited=True) == 3
    assert builds.parts(SIZE, awaited=False) == 1
    assert builds.parts(1, awaited=True) == 1
    plan, samples = step(4)
    try:
        batch = await builds.build(plan, samples, None)
    finally:
        threads.close()
    expected = build_batch(plan, samples, noisy, stacked, True)
    np.testing.assert_array_equal(batch, expected)
    assert batch.shape == (SIZE, 1)
    assert used
    assert all(name.startswith("aioloader-build") for name in used)


class Clock:
    """A clock that moves ``tick`` seconds at each reading: transforms timed with it take
    the same time on any machine, however loaded."""

    def __init__(self, tick: float) -> None:
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


@pytest.mark.parametrize(
    ("tick", "expected"), [(SPLIT_WORTH_SECONDS / 4, 1), (SPLIT_WORTH_SECONDS, 2)]
)
async def test_a_step_is_split_only_when_its_transforms_took_long_enough(
    tick: float, expected: int
) -> None:
    threads = BuildThreads(2)
    builds = SharedBuilds(config(), threads, lambda: 0, 0, clock=Clock(tick))
    plan, samples = step(0)
    assert builds.parts(SIZE, awaited=True) == 2  # not timed yet
    try:
        await builds.build(plan, samples, None)  # each part takes ``tick`` seconds
    finally:
        threads.close()
    assert builds.parts(SIZE, awaited=True) == expected
    assert builds.parts(SIZE, awaited=False) == 1  # a later step never splits


async def test_a_split_step_raises_the_lowest_failing_slot_as_itself() -> None:
    failing = {3, 10}  # in the first and the last of three parts

    @takes_rng
    def fails(sample: np.ndarray, rng: SampleRng) -> np.ndarray:
        if int(sample[0]) in {int(plan.indices[slot]) for slot in failing}:
            raise KeyError(int(sample[0]))
        return sample

    plan, samples = step(2)
    threads = BuildThreads(3)
    builds = SharedBuilds(config(fails), threads, lambda: 2, 2)
    try:
        assert builds.parts(SIZE, awaited=True) == 3
        with pytest.raises(KeyError) as caught:
            await builds.build(plan, samples, None)
    finally:
        threads.close()
    assert caught.value.args == (int(plan.indices[3]),)
    assert getattr(caught.value, TRANSFORM_SLOT) == 3


async def test_a_later_step_leaves_a_thread_for_the_step_the_consumer_waits_for() -> None:
    threads = BuildThreads(2)
    started: list[int] = []

    @takes_rng
    def recording(sample: np.ndarray, rng: SampleRng) -> np.ndarray:
        return sample

    def collate(samples: Sequence[np.ndarray], plan: BatchPlan) -> list[int]:
        started.append(plan.global_step)
        return [plan.global_step]

    builds = SharedBuilds(config(recording, takes_plan(collate)), threads, lambda: 0, 0)
    entered, gate = threading.Event(), threading.Event()

    def blocker() -> None:
        entered.set()
        gate.wait(timeout=60)

    done: dict[int, Any] = {}

    async def build(global_step: int) -> None:
        plan, samples = step(global_step)
        done[global_step] = await builds.build(plan, samples, None)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(threads.run, blocker)  # one of the two threads is busy
            await anyio.to_thread.run_sync(entered.wait)
            group.start_soon(build, 1)  # step 0 still reads: step 1 must leave it a thread
            await anyio.wait_all_tasks_blocked()
            assert started == []
            assert threads.spare() == 1
            await build(0)  # it gets the free thread at once, though step 1 came first
            gate.set()
    finally:
        gate.set()
        threads.close()
    assert started == [0, 1]
    assert done == {0: [0], 1: [1]}


async def test_after_the_first_batch_no_thread_is_kept_idle() -> None:
    threads = BuildThreads(2)
    taken_next = [0]
    builds = SharedBuilds(config(), threads, lambda: taken_next[0], 0)
    entered, gate = threading.Event(), threading.Event()

    def blocker() -> None:
        entered.set()
        gate.wait(timeout=60)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(threads.run, blocker)
            await anyio.to_thread.run_sync(entered.wait)
            plan, samples = step(0)
            await builds.build(plan, samples, None)
            taken_next[0] = 1  # the consumer took step 0; step 1 still reads
            plan, samples = step(3)
            with anyio.fail_after(10):
                batch = await builds.build(plan, samples, None)  # on the free thread at once
            np.testing.assert_array_equal(batch, build_batch(plan, samples, noisy, stacked, True))
            gate.set()
    finally:
        gate.set()
        threads.close()
