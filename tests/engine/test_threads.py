"""aioloader.engine._threads: leaving early cancels queued builds, waits for running ones."""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from aioloader.core import BatchPlan, SequentialSampler
from aioloader.engine import DataLoader
from aioloader.engine._threads import BuildThreads
from aioloader.testing import MemoryDataset

from .helpers import TrackedBatch, TrackingCollator, make_samples

pytestmark = pytest.mark.anyio


async def test_cancelling_callers_takes_queued_jobs_off_the_queue() -> None:
    threads = BuildThreads(1)
    started: list[int] = []
    discarded: list[int] = []
    entered = threading.Event()
    gate = threading.Event()
    queued_callers = 7
    left = [queued_callers]

    def job(number: int) -> int:
        started.append(number)
        if number == 0:
            entered.set()
            gate.wait()
        return number

    async def call(number: int) -> None:
        try:
            await threads.run(job, number, discard=discarded.append)
        finally:
            if number > 0:  # a queued caller has given up its job: once all have, finish job 0
                left[0] -= 1
                if left[0] == 0:
                    gate.set()

    async with anyio.create_task_group() as group:
        group.start_soon(call, 0)
        await anyio.to_thread.run_sync(entered.wait)
        for number in range(1, queued_callers + 1):
            group.start_soon(call, number)
        await anyio.wait_all_tasks_blocked()
        group.cancel_scope.cancel()
    threads.close()
    assert started == [0]  # the queued jobs never ran
    assert discarded == [0]  # the running one finished and its result was handed back


class GatedCollator(TrackingCollator):
    """The first build to start after step 0 was built waits for ``gate``; records every
    step it starts. (Builders hand their steps to the thread in any order: on trio, whose
    scheduler shuffles, step 1 may come before step 0, so no fixed step is gated.)"""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[int] = []
        self.gated: int | None = None
        self.entered = threading.Event()
        self.gate = threading.Event()

    def __call__(self, samples: Sequence[Any], plan: BatchPlan) -> TrackedBatch:
        self.started.append(plan.global_step)
        if self.gated is None and any(b.global_step == 0 for b in self.built):
            self.gated = plan.global_step
            self.entered.set()
            if not self.gate.wait(timeout=120):  # a failing test must not hang the suite
                raise TimeoutError(f"the gate of step {plan.global_step} was never opened")
        return super().__call__(samples, plan)


async def test_leaving_a_stream_early_waits_only_for_the_running_build() -> None:
    collator = GatedCollator()
    loader = DataLoader(
        MemoryDataset(make_samples(40)),
        SequentialSampler(40, 2),
        collator,
        seed=7,
        workers=1,
        prefetch=16,
    )
    stream = loader.stream(0, None)
    first = await stream.__anext__()
    assert first.global_step == 0
    try:
        with anyio.fail_after(60):
            assert await anyio.to_thread.run_sync(collator.entered.wait, 60)
            async with anyio.create_task_group() as group:
                group.start_soon(stream.aclose)
                # every queued build has been given up: the cancellation reaches each builder
                # over several scheduling rounds (close, cancel scope, each builder's wait), so
                # wait until the loop has been quiet a few times over
                for _ in range(8):
                    await anyio.wait_all_tasks_blocked()
                collator.gate.set()
    finally:
        collator.gate.set()  # whatever happened, the build thread is never left waiting
    gated = collator.gated
    assert gated is not None
    assert 0 in collator.started[: collator.started.index(gated)]
    assert collator.started[-1] == gated, collator.started  # those queued were never built
    (zero,) = [b for b in collator.built if b.global_step == 0]
    assert zero.released is False  # step 0 is the consumer's
    assert all(b.released for b in collator.built if b is not zero)  # every other was released
    assert loader.statistics().reads_in_flight == 0


async def test_a_free_thread_takes_the_lowest_step_first_unprioritised_jobs_before_all() -> None:
    threads = BuildThreads(1)
    ran: list[str] = []
    entered, gate = threading.Event(), threading.Event()

    def blocker() -> None:
        entered.set()
        gate.wait(timeout=60)

    async with anyio.create_task_group() as group:
        group.start_soon(threads.run, blocker)
        await anyio.to_thread.run_sync(entered.wait)
        queued: list[tuple[str, int | None]] = [
            ("step 5", 5),
            ("plan", None),
            ("step 2 a", 2),
            ("step 9", 9),
            ("step 2 b", 2),
        ]
        for name, priority in queued:
            group.start_soon(functools.partial(threads.run, ran.append, name, priority=priority))
            await anyio.wait_all_tasks_blocked()
        assert threads.spare() == 0
        gate.set()
    threads.close()
    assert ran == ["plan", "step 2 a", "step 2 b", "step 5", "step 9"]


async def test_spare_counts_threads_neither_busy_nor_spoken_for() -> None:
    threads = BuildThreads(3)
    entered, gate = threading.Event(), threading.Event()

    def blocker() -> None:
        entered.set()
        gate.wait(timeout=60)

    assert threads.spare() == 3
    async with anyio.create_task_group() as group:
        group.start_soon(threads.run, blocker)
        await anyio.to_thread.run_sync(entered.wait)
        assert threads.spare() == 2
        threads.resize(1)  # fewer threads: none spare while one is busy
        assert threads.spare() == 0
        gate.set()
    threads.close()
    assert threads.spare() == 1
