"""aioloader.engine._plans: a run of steps planned per trip, errors at their step."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest

from aioloader.core import BatchPlan, SequentialSampler, plan_batch
from aioloader.engine import DataLoader
from aioloader.engine._plans import PlanAhead, plan_steps
from aioloader.testing import MemoryDataset, StackCollator

from .helpers import make_samples

pytestmark = pytest.mark.anyio

SAMPLER = SequentialSampler(64, 4)


class Planner:
    """``step -> plan`` of ``SAMPLER``, counting calls; fails at the steps in ``failing``."""

    def __init__(self, failing: frozenset[int] = frozenset()) -> None:
        self.failing = failing
        self.planned: list[int] = []

    def __call__(self, step: int) -> BatchPlan:
        self.planned.append(step)
        if step in self.failing:
            raise LookupError(f"no plan for {step}")
        return plan_batch(SAMPLER, 7, step)


class Trips:
    """Runs each trip inline, recording its ``(first, stop)``; trips can be held at a gate."""

    def __init__(self) -> None:
        self.trips: list[tuple[int, int]] = []
        self.gate: anyio.Event | None = None
        self.entered = anyio.Event()

    async def __call__(self, function: Callable[..., Any], *args: Any) -> Any:
        self.trips.append((args[1], args[2]))
        self.entered.set()
        if self.gate is not None:
            with anyio.fail_after(5, shield=False):
                await self.gate.wait()
        return function(*args)


def indices_of(plan: BatchPlan) -> list[int]:
    return plan.indices.tolist()  # type: ignore[no-any-return]


def test_plan_steps_keeps_each_error_with_its_note() -> None:
    plans = plan_steps(Planner(frozenset({2})), 1, 4)
    assert [type(p).__name__ for p in plans] == ["BatchPlan", "LookupError", "BatchPlan"]
    assert getattr(plans[1], "__notes__", []) == ["aioloader: while planning global step 2"]
    assert indices_of(plans[2]) == [12, 13, 14, 15]


async def test_one_trip_plans_a_run_and_hands_each_step_out_once() -> None:
    planner, trips = Planner(), Trips()
    ahead = PlanAhead(planner, stop=10, run=4)
    got = [indices_of(await ahead.get(step, trips)) for step in range(10)]
    assert got == [list(range(4 * s, 4 * s + 4)) for s in range(10)]
    assert trips.trips == [(0, 4), (4, 8), (8, 10)]  # the stop bounds the last run
    assert ahead.trips == 3
    assert planner.planned == list(range(10))


async def test_a_step_asked_out_of_order_starts_its_own_run() -> None:
    planner, trips = Planner(), Trips()
    ahead = PlanAhead(planner, stop=None, run=4)
    assert indices_of(await ahead.get(2, trips)) == [8, 9, 10, 11]
    assert indices_of(await ahead.get(0, trips)) == [0, 1, 2, 3]
    assert indices_of(await ahead.get(3, trips)) == [12, 13, 14, 15]
    # the run from 0 stopped at the first step waiting to be handed out (3); step 2 was
    # handed out already, so it is planned again (a plan is a pure function of the step)
    assert trips.trips == [(2, 6), (0, 3)]
    assert planner.planned == [2, 3, 4, 5, 0, 1, 2]


async def test_an_error_is_raised_at_its_step_only() -> None:
    ahead = PlanAhead(Planner(frozenset({1})), stop=None, run=3)
    trips = Trips()
    assert indices_of(await ahead.get(0, trips)) == [0, 1, 2, 3]
    with pytest.raises(LookupError, match="no plan for 1") as caught:
        await ahead.get(1, trips)
    assert getattr(caught.value, "__notes__", []) == ["aioloader: while planning global step 1"]
    assert indices_of(await ahead.get(2, trips)) == [8, 9, 10, 11]
    assert trips.trips == [(0, 3)]


async def test_tasks_asking_during_a_trip_wait_for_it() -> None:
    planner, trips = Planner(), Trips()
    trips.gate = anyio.Event()
    ahead = PlanAhead(planner, stop=None, run=4)
    got: dict[int, list[int]] = {}

    async def get(step: int) -> None:
        got[step] = indices_of(await ahead.get(step, trips))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(get, 0)
            await trips.entered.wait()
            for step in (1, 2, 3):
                group.start_soon(get, step)
            await anyio.wait_all_tasks_blocked()
            trips.gate.set()
    assert got == {s: list(range(4 * s, 4 * s + 4)) for s in range(4)}
    assert trips.trips == [(0, 4)]


async def test_a_cancelled_trip_leaves_its_steps_to_the_next_asker() -> None:
    planner, trips = Planner(), Trips()
    trips.gate = anyio.Event()
    ahead = PlanAhead(planner, stop=None, run=4)
    got: list[list[int]] = []
    first_scope = anyio.CancelScope()

    async def first() -> None:
        with first_scope:
            await ahead.get(0, trips)

    async def waiter() -> None:
        got.append(indices_of(await ahead.get(2, trips)))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(first)
            await trips.entered.wait()
            group.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()  # the waiter waits for the first trip
            trips.gate = None  # the next trip runs at once
            first_scope.cancel()
    assert got == [[8, 9, 10, 11]]
    assert trips.trips == [(0, 4), (2, 6)]
    assert planner.planned == [2, 3, 4, 5]  # the cancelled trip planned nothing


async def test_a_threaded_loader_plans_in_runs_and_keeps_every_batch() -> None:
    samples = make_samples(64)
    sampler = SequentialSampler(64, 4)
    loader = DataLoader(MemoryDataset(samples), sampler, StackCollator(), seed=3, workers=2)
    seen = []
    with anyio.fail_after(20):
        async with loader.stream(0, 40) as batches:
            async for batch in batches:
                with batch:
                    seen.append(batch.indices.tolist())
    assert seen == [list(range(4 * (s % 16), 4 * (s % 16) + 4)) for s in range(40)]


async def test_a_threaded_loader_raises_a_planning_error_at_its_step() -> None:
    class FailsAtFive:
        steps_per_epoch = 16

        def indices(self, seed: int, epoch: int, step: int) -> Any:
            if step == 5:
                raise LookupError("step five")
            return np.arange(4 * step, 4 * step + 4)

    loader = DataLoader(
        MemoryDataset(make_samples(64)), FailsAtFive(), StackCollator(), seed=0, workers=2
    )
    delivered: list[int] = []

    async def consume() -> None:
        async with loader.stream(0, 16) as batches:
            async for batch in batches:
                delivered.append(batch.global_step)
                batch.release()

    with anyio.fail_after(20), pytest.raises(LookupError, match="step five") as caught:
        await consume()
    assert delivered == [0, 1, 2, 3, 4]
    assert "aioloader: while planning global step 5" in getattr(caught.value, "__notes__", [])


async def indices_while_the_loop_runs(
    loader: DataLoader[Any, Any], stop: int, planning: threading.Event, loop_ran: threading.Event
) -> list[list[int]]:
    """Each batch's indices of steps ``[0, stop)``, while a task on the event loop sets
    ``loop_ran`` once the sampler has set ``planning``."""

    async def run_on_the_loop() -> None:
        while not planning.is_set():
            await anyio.lowlevel.checkpoint()
        loop_ran.set()

    seen = []
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(run_on_the_loop)
            async with loader.stream(0, stop) as batches:
                async for batch in batches:
                    with batch:
                        seen.append(batch.indices.tolist())
    return seen


@pytest.mark.parametrize("workers", [0, 2])
async def test_an_epochs_first_plan_never_holds_the_event_loop(workers: int) -> None:
    planning = threading.Event()  # epoch 1's first step is being planned
    loop_ran = threading.Event()  # a task on the event loop ran meanwhile

    class SlowEpochStart:
        """Orders a whole epoch at its first step (as Bucketed and Packed do); here that
        can only end while the event loop runs on."""

        steps_per_epoch = 16

        def indices(self, seed: int, epoch: int, step: int) -> np.ndarray[Any, Any]:
            if (epoch, step) == (1, 0):
                planning.set()
                assert loop_ran.wait(timeout=10), "the plan held the event loop"
            return SAMPLER.indices(seed, epoch, step)

    dataset = MemoryDataset(make_samples(64))
    loader = DataLoader(dataset, SlowEpochStart(), StackCollator(), seed=3, workers=workers)
    seen = await indices_while_the_loop_runs(loader, 20, planning, loop_ran)
    assert seen == [list(range(4 * (s % 16), 4 * (s % 16) + 4)) for s in range(20)]


async def test_steps_claimed_beyond_the_first_trip_wait_for_the_epoch_off_the_loop() -> None:
    planning = threading.Event()
    loop_ran = threading.Event()
    built: set[int] = set()
    build_lock = threading.Lock()  # as a sampler's epoch cache: later calls wait for the build
    long_epochs = SequentialSampler(256, 4)  # 64 steps an epoch, more than one trip plans

    class LockedEpochBuild:
        steps_per_epoch = 64

        def indices(self, seed: int, epoch: int, step: int) -> np.ndarray[Any, Any]:
            with build_lock:
                if epoch == 1 and epoch not in built:
                    planning.set()
                    assert loop_ran.wait(timeout=10), "a plan held the event loop"
                built.add(epoch)
            return long_epochs.indices(seed, epoch, step)

    dataset = MemoryDataset(make_samples(256))
    loader = DataLoader(dataset, LockedEpochBuild(), StackCollator(), seed=3, prefetch=32)
    seen = await indices_while_the_loop_runs(loader, 100, planning, loop_ran)  # 32 ahead
    assert seen == [list(range(4 * (s % 64), 4 * (s % 64) + 4)) for s in range(100)]
