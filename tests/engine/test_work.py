"""StreamWork: nothing escapes a hosted stream; the compiled kernels load off the loop."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc
import pytest

from aioloader.core import BatchPlan, ImageBatchCollator, SequentialSampler, takes_plan
from aioloader.datasets import line_images
from aioloader.engine import DataLoader, _work
from aioloader.kernels import _selection as _backend
from aioloader.kernels._cache import FILLED
from aioloader.testing import MemoryDataset
from tests._support.kernels import WITHHELD, BlockingLoad, slow_kernels

from .helpers import TrackingCollator, make_samples

pytestmark = pytest.mark.anyio


async def test_an_engine_error_outside_the_build_reaches_the_consumer(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken_run(self: _work.StreamWork[object]) -> None:
        raise RuntimeError("the engine broke before its first step")

    # before the guard: asyncio's consumer waited forever, trio's whole run crashed
    monkeypatch.setattr(_work.StreamWork, "run", broken_run)
    loader = DataLoader(
        MemoryDataset(make_samples(8)), SequentialSampler(8, 2), TrackingCollator(), seed=1
    )
    with anyio.fail_after(30), pytest.raises(RuntimeError, match="before its first step"):
        async for _ in loader:
            pass
    assert "a stream's engine failed" in caplog.text


# -- the compiled kernels load off the event loop -----------------------------------------
TICKS = 5
"""Heartbeats that must run while the kernels load (the load waits for them)."""


def image_loader(steps: int) -> DataLoader[Any, Any]:
    """Sequential line images: the collator asks for the compiled kernels on every batch."""
    dataset, sampler = line_images(4 * steps), SequentialSampler(4 * steps, 4)
    return DataLoader(dataset, sampler, ImageBatchCollator(4), seed=3, prefetch=2)


class Heartbeat:
    """A task on the loop that counts its wakes while the kernels load, and releases the
    load after ``TICKS`` of them: a load on the loop's thread would never see one."""

    def __init__(self, load: BlockingLoad) -> None:
        self.load = load
        self.ticks_while_loading = 0

    async def run(self) -> None:
        load = self.load
        while not load.finished.is_set():
            if load.started.is_set() and self.ticks_while_loading < TICKS:
                self.ticks_while_loading += 1
                if self.ticks_while_loading == TICKS:
                    load.release.set()
            await anyio.sleep(0.001)  # a heartbeat: its wakes are counted, never timed


async def test_auto_loads_the_kernels_beside_the_stream_while_the_loop_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    load = BlockingLoad()
    filler = slow_kernels(monkeypatch, load)
    heartbeat = Heartbeat(load)
    taken = 0
    with _backend.use_kernels("auto"), anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(heartbeat.run)
            async with image_loader(8).stream(0, 8) as batches:
                async for batch in batches:
                    batch.release()
                    taken += 1
                    if taken == 1:
                        filler.filled()  # the child is done: the next steps load them
            group.cancel_scope.cancel()  # the heartbeat, once the stream has ended
    # before: the next batch built on the loop loaded the kernels there (0.6 s of numba's
    # import and set-up); the heartbeat stood still and the load waited out its bound
    assert heartbeat.ticks_while_loading == TICKS
    assert load.released
    assert len(load.threads) == 1
    assert load.threads[0] != threading.get_ident()
    assert taken == 8
    assert _backend.failure() == WITHHELD
    assert _backend.active() == "numpy"


async def test_numba_loads_the_kernels_before_the_first_step_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    load = BlockingLoad()
    slow_kernels(monkeypatch, load)
    heartbeat = Heartbeat(load)
    loaded_at_first_batch = None
    with _backend.use_kernels("numba"), anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(heartbeat.run)
            async with image_loader(3).stream(0, 3) as batches:
                async for batch in batches:
                    batch.release()
                    if loaded_at_first_batch is None:
                        loaded_at_first_batch = load.finished.is_set()
            group.cancel_scope.cancel()
    # before: the first batch, built on the loop, loaded (or compiled) them there
    assert heartbeat.ticks_while_loading == TICKS
    assert load.released
    assert loaded_at_first_batch is True  # the first batch waited for them, the loop did not
    assert len(load.threads) == 1
    assert load.threads[0] != threading.get_ident()


def test_steps_built_on_the_loop_never_load_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    load = BlockingLoad(blocks=False)
    slow_kernels(monkeypatch, load, FILLED)
    with _backend.use_kernels("auto"), _backend.loading_elsewhere():
        assert _backend.compiled() is None
    assert load.threads == []
    with _backend.use_kernels("numba"), _backend.loading_elsewhere():
        assert _backend.compiled() is None
    assert load.threads == []


# -- a source's background reads run beside the stream's steps ---------------------------
class ServedSource:
    """An async source with ``serve_reads``: notes when its server starts and stops and
    each read, so the order is seen."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.events: list[str] = []

    def __len__(self) -> int:
        return self.size

    async def serve_reads(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self.events.append("serving")
        task_status.started()
        try:
            await anyio.sleep_forever()
        finally:
            self.events.append("stopped")

    async def get_sample(self, index: int) -> int:
        self.events.append("read")
        return index


async def test_a_sources_server_runs_from_before_the_first_read_to_the_streams_end() -> None:
    source = ServedSource(8)
    loader: DataLoader[int, list[int]] = DataLoader(
        source, SequentialSampler(8, 2), list, seed=1, prefetch=3
    )
    with anyio.fail_after(30):
        batches = [batch async for batch in loader]
        await loader.aclose_streams()  # the stream's work has ended
    assert batches == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert source.events == ["serving"] + ["read"] * 8 + ["stopped"]


async def test_a_sources_server_stops_when_the_stream_is_left_early() -> None:
    source = ServedSource(64)
    loader: DataLoader[int, list[int]] = DataLoader(
        source, SequentialSampler(64, 2), list, seed=1, prefetch=2
    )
    with anyio.fail_after(30):
        async for batch in loader:
            assert batch == [0, 1]
            break
        await loader.aclose_streams()
    assert source.events[0] == "serving"
    assert source.events[-1] == "stopped"
    assert source.events.count("serving") == source.events.count("stopped") == 1


# -- a stream's first batch has the machine to itself --------------------------------------
class LoggedReads(MemoryDataset[Any]):
    """A ``MemoryDataset`` that notes each read (of a step's samples) in a shared log."""

    def __init__(self, samples: list[Any], log: list[tuple[str, int]]) -> None:
        super().__init__(samples)
        self.log = log

    async def get_samples(self, indices: Sequence[int]) -> list[Any]:
        self.log.extend(("read", index) for index in indices)
        return await super().get_samples(indices)


def two_threads(dataset: LoggedReads, collator: Any) -> DataLoader[Any, Any]:
    """8 steps of 4 an epoch, built on 2 threads, 4 steps ahead."""
    return DataLoader(dataset, SequentialSampler(32, 4), collator, seed=1, workers=2, prefetch=4)


@pytest.mark.parametrize("start", [0, 3])
async def test_later_steps_read_only_once_the_streams_first_batch_is_built(start: int) -> None:
    log: list[tuple[str, int]] = []
    lock = threading.Lock()

    @takes_plan
    def noting(samples: Sequence[Any], plan: BatchPlan) -> list[Any]:
        with lock:
            log.append(("built", plan.global_step))
        return list(samples)

    loader = two_threads(LoggedReads(make_samples(32), log), noting)
    with anyio.fail_after(30):
        async with loader.stream(start, start + 6) as batches:
            got = [batch async for batch in batches]
    assert len(got) == 6
    built = log.index(("built", start))  # 8 steps an epoch: step 8 reads 0-3 again
    assert [index for what, index in log[:built] if what == "read"] == [
        (4 * start + k) % 32 for k in range(4)
    ]
    assert sorted(index for what, index in log[built:] if what == "read") == sorted(
        (4 * start + k) % 32 for k in range(4, 24)
    )


async def test_a_loaders_later_streams_read_their_steps_at_once() -> None:
    log: list[tuple[str, int]] = []
    second_read = threading.Event()  # step 2's samples were read
    waited: list[bool] = []

    class Noting(LoggedReads):
        async def get_samples(self, indices: Sequence[int]) -> list[Any]:
            if 8 in indices:
                second_read.set()
            return await super().get_samples(indices)

    @takes_plan
    def first_waits(samples: Sequence[Any], plan: BatchPlan) -> list[Any]:
        if plan.global_step == 1:  # the later stream's first: built once step 2 has read
            waited.append(second_read.wait(10))
        return list(samples)

    loader = two_threads(Noting(make_samples(32), log), first_waits)
    with anyio.fail_after(30):
        async with loader.stream(0, 1) as batches:  # the first stream: its first batch alone
            assert len([batch async for batch in batches]) == 1
        async with loader.stream(1, 7) as batches:
            assert len([batch async for batch in batches]) == 6
    assert waited == [True]  # step 2 read while step 1 was being built
