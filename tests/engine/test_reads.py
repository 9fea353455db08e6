"""aioloader.engine._reads: reads without a task per sample, bounded, cancellable, exact."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest

from aioloader import LoaderClosedError, takes_plan, takes_rng
from aioloader.core import BatchPlan, SequentialSampler, ShuffledSampler
from aioloader.engine import DataLoader, _reads
from aioloader.engine._build import build_batch, transform_takes_rng
from aioloader.engine._reads import ReadBound, is_in_memory
from aioloader.testing import MemoryDataset, StackCollator

from .helpers import TrackingCollator, digests, jitter, make_samples

pytestmark = pytest.mark.anyio


class Counting:
    """``get_sample`` waits ``waits`` times (checkpoints) for the indices in ``waiting``."""

    def __init__(self, n: int, waits: int = 3, waiting: set[int] | None = None) -> None:
        self.samples = make_samples(n)
        self.waits = waits
        self.waiting = set(range(n)) if waiting is None else waiting
        self.in_flight = 0
        self.peak = 0
        self.tasks: set[Any] = set()

    def __len__(self) -> int:
        return len(self.samples)

    async def get_sample(self, index: int) -> Any:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.tasks.add(anyio.get_current_task().id)
        try:
            if index in self.waiting:
                for _ in range(self.waits):
                    await anyio.lowlevel.checkpoint()
            return self.samples[index]
        finally:
            self.in_flight -= 1


def reference(n: int, batch: int, stop: int) -> list[str]:
    """Digests of steps ``[0, stop)`` built directly, without the engine."""
    from aioloader.core import plan_batch

    sampler = ShuffledSampler(n, batch, drop_last=False)
    samples = make_samples(n)
    out = []
    for step in range(stop):
        plan = plan_batch(sampler, 7, step)
        out.append(
            build_batch(
                plan, [samples[i] for i in plan.indices.tolist()], jitter, TrackingCollator()
            )
        )
    return digests(out)


async def stream_digests(dataset: Any, n: int, batch: int, stop: int, **options: Any) -> list[str]:
    loader = DataLoader(
        dataset,
        ShuffledSampler(n, batch, drop_last=False),
        TrackingCollator(),
        seed=7,
        transform=jitter,
        **options,
    )
    async with loader.stream(0, stop) as batches:
        return digests([b async for b in batches])


@pytest.mark.parametrize("workers", [0, 2])
async def test_reads_in_flight_never_exceed_the_bound(workers: int) -> None:
    dataset = Counting(512)
    loader = DataLoader(
        dataset,
        SequentialSampler(512, 64),
        StackCollator(),
        seed=0,
        workers=workers,
        prefetch=4,
        max_inflight_reads=5,
    )
    async with loader.stream(0, 8) as batches:
        assert len([b async for b in batches]) == 8
    assert dataset.peak == 5
    stats = loader.statistics()
    assert (stats.peak_reads_in_flight, stats.reads_in_flight, stats.reads_total) == (5, 0, 512)


async def test_immediate_reads_run_in_the_builder_tasks() -> None:
    dataset = Counting(256, waiting=set())
    loader = DataLoader(dataset, SequentialSampler(256, 32), StackCollator(), seed=0, prefetch=3)
    async with loader.stream(0, 8) as batches:
        assert len([b async for b in batches]) == 8
    assert len(dataset.tasks) <= 3  # no task per sample: only the 3 builders ever read
    assert dataset.peak == 1


@pytest.mark.parametrize("waiting", ["none", "odd", "all"])
async def test_fast_and_waiting_reads_give_the_same_batches(waiting: str) -> None:
    chosen = {"none": set(), "odd": set(range(1, 203, 2)), "all": set(range(203))}[waiting]
    got = await stream_digests(Counting(203, waiting=chosen), 203, 16, 20)
    assert got == reference(203, 16, 20)
    assert got == await stream_digests(MemoryDataset(make_samples(203)), 203, 16, 20, workers=2)


async def test_one_failing_read_among_1024_names_its_slot() -> None:
    class OneBad(Counting):
        async def get_sample(self, index: int) -> Any:
            if index == 700:
                await anyio.lowlevel.checkpoint()
                raise OSError("disk says no")
            return await super().get_sample(index)

    loader = DataLoader(
        OneBad(2048, waiting=set(range(0, 2048, 2))),
        SequentialSampler(2048, 1024),
        StackCollator(),
        seed=0,
    )
    stream = loader.stream(0, 2)
    with pytest.raises(OSError, match="disk says no") as caught:
        await stream.__anext__()
    assert type(caught.value) is OSError
    assert getattr(caught.value, "__notes__", None) == [
        "aioloader: while building global step 0 (epoch 0, step 0), slot 700, dataset index 700"
    ]
    with pytest.raises(LoaderClosedError, match="failed"):
        await stream.__anext__()
    await stream.aclose()


async def test_cancellation_mid_read_cancels_every_read() -> None:
    started = anyio.Event()
    cancelled: list[int] = []

    class Blocking:
        in_flight = 0

        def __len__(self) -> int:
            return 64

        async def get_sample(self, index: int) -> int:
            Blocking.in_flight += 1
            if Blocking.in_flight == 16:
                started.set()
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                cancelled.append(index)
                raise
            finally:
                Blocking.in_flight -= 1
            return index

    loader = DataLoader(Blocking(), SequentialSampler(64, 16), StackCollator(), seed=0, prefetch=1)
    async with anyio.create_task_group() as group:

        async def consume() -> None:
            async with loader.stream(0, 4) as batches:
                await batches.__anext__()

        group.start_soon(consume)
        await started.wait()
        group.cancel_scope.cancel()
    assert sorted(cancelled) == list(range(16))
    assert Blocking.in_flight == 0
    assert loader.statistics().reads_in_flight == 0


def test_sync_dataset_chunks_spread_over_the_build_threads() -> None:
    barrier = threading.Barrier(2, timeout=30)
    first_of_chunk = {0, 8}  # a batch of 16 in 2 chunks: [0, 8) and [8, 16)
    threads: set[int] = set()

    class Blocking(list[Any]):
        def __getitem__(self, index: Any) -> Any:
            threads.add(threading.get_ident())
            if index in first_of_chunk:
                barrier.wait()  # both chunks must run at once, or this times out
            return super().__getitem__(index)

    class NotInMemory:
        def __init__(self) -> None:
            self.inner = Blocking(make_samples(16))

        def __len__(self) -> int:
            return 16

        def __getitem__(self, index: int) -> Any:
            return self.inner[index]

    loader = DataLoader(
        NotInMemory(), SequentialSampler(16, 16), StackCollator(), seed=0, workers=2
    )
    batch = next(iter(loader.iter_sync(0, 1)))
    assert batch.indices.tolist() == list(range(16))
    assert len(threads) == 2


async def test_in_memory_sync_dataset_is_read_on_the_loop_thread() -> None:
    loop_thread = threading.get_ident()
    seen: set[int] = set()

    class InMemory:
        in_memory = True

        def __len__(self) -> int:
            return 8

        def __getitem__(self, index: int) -> int:
            seen.add(threading.get_ident())
            return index

    @takes_plan
    def collate(samples: Sequence[int], plan: BatchPlan) -> list[int]:
        return list(samples)

    loader = DataLoader(InMemory(), SequentialSampler(8, 4), collate, seed=0)
    async with loader.stream(0, 2) as batches:
        assert [b async for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert seen == {loop_thread}
    assert is_in_memory([1, 2])
    assert is_in_memory(np.zeros(3))
    assert not is_in_memory(object())


def test_a_transform_of_one_parameter_gets_no_rng() -> None:
    def plain(sample: Any) -> Any:
        return sample * 2

    @takes_rng
    def with_rng(sample: Any, rng: Any) -> Any:
        return sample * 2

    assert not transform_takes_rng(plain)
    assert transform_takes_rng(with_rng)
    assert transform_takes_rng(takes_rng(lambda *args: args[0]))
    sampler = SequentialSampler(8, 4)
    a = DataLoader(
        MemoryDataset(make_samples(8)), sampler, StackCollator(), seed=0, transform=plain
    )
    b = DataLoader(
        MemoryDataset(make_samples(8)), sampler, StackCollator(), seed=0, transform=with_rng
    )
    got_a = [x.data.tolist() for x in a.iter_sync(0, 2)]
    got_b = [x.data.tolist() for x in b.iter_sync(0, 2)]
    assert got_a == got_b


async def test_read_bound_waiters_are_served_in_order() -> None:
    bound = ReadBound(2)
    assert bound.try_acquire()
    assert bound.try_acquire()
    assert not bound.try_acquire()
    order: list[int] = []
    arrived: list[int] = []

    async def take(k: int) -> None:
        arrived.append(k)  # trio starts tasks in any order: compare with arrival
        await bound.acquire()
        order.append(k)

    async with anyio.create_task_group() as group:
        for k in range(3):
            group.start_soon(take, k)
        await anyio.wait_all_tasks_blocked()
        for _ in range(3):
            bound.release()
            await anyio.wait_all_tasks_blocked()
    assert order == arrived
    assert sorted(order) == [0, 1, 2]
    assert (bound.in_flight, bound.peak, bound.total) == (2, 2, 5)


class Watched:
    """``get_sample`` returns at once and notes how many turns another task has had."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.turns = 0
        self.seen: list[int] = []

    def __len__(self) -> int:
        return self.n

    async def get_sample(self, index: int) -> int:
        self.seen.append(self.turns)
        return index


async def test_reads_that_never_wait_give_the_loop_a_turn_once_the_slice_is_spent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = iter(range(10**9))
    monkeypatch.setattr(_reads, "clock", lambda: float(next(ticks)))  # 1 s per reading
    dataset = Watched(1024)
    loader = DataLoader(dataset, SequentialSampler(1024, 1024), StackCollator(), seed=0, prefetch=1)

    async def other_task() -> None:
        while True:
            dataset.turns += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(other_task)
        async with loader.stream(0, 1) as batches:
            got = [batch async for batch in batches]
        group.cancel_scope.cancel()
    assert got[0].data.tolist() == list(range(1024))  # the same batch
    stats = loader.statistics()  # one unit of the bound passed from read to read, given back
    assert (stats.reads_total, stats.reads_in_flight, stats.peak_reads_in_flight) == (1024, 0, 1)
    every = _reads.LoopSlice.check_every
    runs = [dataset.seen[i : i + every] for i in range(0, 1024, every)]
    assert all(len(set(run)) == 1 for run in runs)  # runs of 32 reads, back to back
    firsts = [run[0] for run in runs]
    # the other task ran at each turn of the loop: between every two runs on asyncio; trio,
    # which may reverse a batch of tasks, may run the builder at the end of one and the start
    # of the next, so between every three
    assert all(a < c for a, c in zip(firsts, firsts[2:], strict=False))
    assert firsts[-1] - firsts[0] >= len(runs) // 2


async def test_runners_that_give_way_in_one_turn_share_the_next_slice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [0.0]
    monkeypatch.setattr(_reads, "clock", lambda: now[0])
    loop_slice = _reads.LoopSlice(0.001)
    now[0] = 0.002
    assert loop_slice.spent()
    async with anyio.create_task_group() as group:
        for _ in range(3):
            group.start_soon(loop_slice.give_way)
    # the first runner back started one new slice; the others went on in it
    assert (loop_slice.turn, loop_slice.started, loop_slice.spent()) == (1, 0.002, False)
    loop_slice.after_wait(0)  # a read that waited since turn 0: a slice has begun since
    assert loop_slice.turn == 1
    now[0] = 0.0035
    assert loop_slice.spent()
    loop_slice.after_wait(1)
    assert (loop_slice.turn, loop_slice.started, loop_slice.spent()) == (2, 0.0035, False)
