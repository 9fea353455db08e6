"""aioloader.engine._stream / _work / _loader: the engine keeps its promises whatever the
consumer does (early exit, cancellation, reuse, resume). One test per promise."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest
import sniffio

from aioloader import LoaderClosedError, takes_plan
from aioloader.core import (
    BatchPlan,
    BufferPool,
    GainOffset,
    ImageBatchCollator,
    RankSlice,
    SequentialSampler,
    ShuffledSampler,
)
from aioloader.datasets import line_images
from aioloader.engine import DataLoader
from aioloader.engine._stream import StreamState
from aioloader.kernels import _selection as _backend
from aioloader.testing import FailingDataset, MemoryDataset, StackCollator

from .helpers import make_samples

pytestmark = pytest.mark.anyio


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * 4096 / 2**20


def _task_count() -> int:
    if sniffio.current_async_library() == "trio":
        import trio

        root = trio.lowlevel.current_root_task()
        assert root is not None
        return sum(len(nursery.child_tasks) for nursery in root.child_nurseries)
    return len(asyncio.all_tasks())


class Waits(MemoryDataset[Any]):
    """Reads that wait once, so the builders really run ahead of the consumer."""

    async def get_sample(self, index: int) -> Any:
        await anyio.lowlevel.checkpoint()
        return await super().get_sample(index)


def image_loader(pool: BufferPool, workers: int = 2) -> DataLoader[Any, Any]:
    return DataLoader(
        Waits(line_images(64, seed=3)._samples),
        ShuffledSampler(64, 8),
        ImageBatchCollator(4, augment=GainOffset(), pool=pool),
        seed=1,
        workers=workers,
        prefetch=3,
    )


# -- 1: leaving a bare ``async for`` leaks nothing ------------------------------------------
async def test_leaving_bare_loops_leaks_nothing() -> None:
    _backend.load()  # the kernels are loaded before the baseline, not in the middle of it
    pool = BufferPool()
    loader = image_loader(pool)
    async for batch in loader:  # warm up: first threads, buffers, imports
        batch.release()
        break
    await loader.aclose_streams()
    gc.collect()
    threads, tasks, rss = set(threading.enumerate()), _task_count(), _rss_mib()

    for _ in range(100):
        stream = loader.stream()
        ref = weakref.ref(stream)
        async for batch in stream:
            batch.release()
            break
        del stream
        assert ref() is None  # the handle is collected at once (nothing holds it)

    async def failing_body() -> None:
        async for batch in loader:
            batch.release()
            raise KeyError("the loop body failed")

    for _ in range(100):
        with pytest.raises(KeyError):
            await failing_body()
    await loader.aclose_streams()
    gc.collect()
    assert loader._works == set()
    # No thread started since the baseline is alive; threads alive then may have ended (a
    # thread cache of an earlier test, say trio's, lets idle workers go after 10 s).
    assert [thread for thread in threading.enumerate() if thread not in threads] == []
    assert _task_count() == tasks
    assert pool.statistics().buffers_out == 0
    assert _rss_mib() - rss < 64  # MiB; 200 leaked streams held ~900 MiB


async def test_a_dropped_stream_cancels_its_work_before_the_next_step() -> None:
    loader = image_loader(BufferPool())
    it = loader.stream(0, None)
    await it.__anext__()
    work = it._work
    del it  # the consumer lets go: the work is cancelled synchronously
    assert work._cancelled
    await work.wait_ended()
    assert loader._works == set()


# -- 2: a cancelled ``__anext__`` leaves the stream usable --------------------------------
async def test_a_cancelled_anext_leaves_the_stream_usable() -> None:
    gate = anyio.Event()

    class Gated(MemoryDataset[Any]):
        async def get_sample(self, index: int) -> Any:
            await gate.wait()
            return await super().get_sample(index)

    loader = DataLoader(Gated(make_samples(40)), SequentialSampler(40, 4), StackCollator(), seed=0)
    async with loader.stream(stop=10) as batches:
        with anyio.move_on_after(0):
            await batches.__anext__()
        assert batches.state is StreamState.RUNNING
        gate.set()
        got = [b.global_step async for b in batches]
    assert got == list(range(10))
    assert loader.next_step == 10


# -- 3: LoaderClosedError after close or failure -------------------------------------------
async def test_use_after_close_or_failure_raises_loader_closed() -> None:
    loader = DataLoader(
        MemoryDataset(make_samples(8)), SequentialSampler(8, 2), StackCollator(), seed=0
    )
    stream = loader.stream(0, 4)
    await stream.__anext__()
    await stream.aclose()
    assert stream.state is StreamState.CLOSED
    with pytest.raises(LoaderClosedError, match="closed with aclose"):
        await stream.__anext__()

    failing = DataLoader(
        FailingDataset(MemoryDataset(make_samples(8)), {3}),
        SequentialSampler(8, 2),
        StackCollator(),
        seed=0,
    )
    stream = failing.stream()
    await stream.__anext__()
    with pytest.raises(OSError, match="index 3"):
        await stream.__anext__()
    assert stream.state is StreamState.FAILED
    with pytest.raises(LoaderClosedError, match=r"failed \(OSError at global step 1\)"):
        await stream.__anext__()
    await stream.aclose()

    finished = loader.stream(0, 1)
    assert [b.global_step async for b in finished] == [0]
    with pytest.raises(StopAsyncIteration):
        await finished.__anext__()
    assert finished.state is StreamState.FINISHED


# -- 4: only cursor-driven iteration moves the cursor -------------------------------------
async def test_explicit_ranges_leave_the_cursor_alone() -> None:
    loader = DataLoader(
        MemoryDataset(make_samples(40)), ShuffledSampler(40, 4), StackCollator(), seed=0
    )
    async with loader.stream(stop=5) as batches:  # cursor-driven
        assert [b.global_step async for b in batches] == [0, 1, 2, 3, 4]
    assert loader.state_dict()["next_step"] == 5
    async with loader.stream(900, 903) as batches:  # a peek: explicit range
        assert [b.global_step async for b in batches] == [900, 901, 902]
    assert loader.state_dict()["next_step"] == 5
    async for batch in loader:  # the rest of the epoch, cursor-driven
        assert batch.global_step >= 5
    assert loader.state_dict()["next_step"] == 10


# -- 5: configuration is read-only ---------------------------------------------------------
def test_configuration_is_read_only() -> None:
    loader = DataLoader(
        MemoryDataset(make_samples(8)), SequentialSampler(8, 2), StackCollator(), seed=0
    )
    for name, value in (("dataset", MemoryDataset([])), ("seed", 2**70), ("workers", 4)):
        with pytest.raises(AttributeError, match=rf"^DataLoader.{name} is read-only"):
            setattr(loader, name, value)
    assert loader.seed == 0


# -- 6: resume state carries a version and a fingerprint ----------------------------------
def test_state_for_another_stream_is_refused() -> None:
    samples = MemoryDataset(make_samples(100))
    saved = DataLoader(samples, ShuffledSampler(100, 10), StackCollator(), seed=3)
    saved.load_state_dict({"seed": 3, "next_step": 4})  # version 1: seed only
    state = saved.state_dict()
    other = DataLoader(samples, ShuffledSampler(100, 20), StackCollator(), seed=3)
    with pytest.raises(ValueError, match=r"batch_size=10.*batch_size=20") as caught:
        other.load_state_dict(state)
    assert "check_stream=False" in str(caught.value)
    other.load_state_dict(state, check_stream=False)
    assert other.next_step == 4
    shorter = DataLoader(
        MemoryDataset(make_samples(90)), ShuffledSampler(90, 10), StackCollator(), seed=3
    )
    with pytest.raises(ValueError, match="over a dataset of 100 items"):
        shorter.load_state_dict(state)
    with pytest.raises(ValueError, match=r"^state\['version'\] must be 1, 2 or 3 .* got 99$"):
        saved.load_state_dict({**state, "version": 99})


def test_state_resumes_on_another_world_size() -> None:
    samples = MemoryDataset(make_samples(64))
    four = DataLoader(samples, RankSlice(ShuffledSampler(64, 8), 1, 4), StackCollator(), seed=3)
    two = DataLoader(samples, RankSlice(ShuffledSampler(64, 8), 0, 2), StackCollator(), seed=3)
    four.load_state_dict({"seed": 3, "next_step": 6})
    two.load_state_dict(four.state_dict())
    assert two.next_step == 6


# -- 8: one loader on two backends in turn -------------------------------------------------
def test_one_loader_runs_on_two_backends_in_turn() -> None:
    loader = DataLoader(
        Waits(make_samples(64)),
        SequentialSampler(64, 8),
        StackCollator(),
        seed=0,
        max_inflight_reads=2,
    )

    async def steps() -> list[int]:
        async with loader.stream(0, 8) as batches:
            return [b.global_step async for b in batches]

    assert anyio.run(steps) == list(range(8))
    assert anyio.run(steps, backend="trio") == list(range(8))
    assert anyio.run(steps, backend_options={"use_uvloop": True}) == list(range(8))


# -- 11: the smaller promises --------------------------------------------------------------
async def test_a_sync_get_sample_returning_a_coroutine_is_an_error() -> None:
    class Confused:
        def __len__(self) -> int:
            return 4

        def get_sample(self, index: int) -> Any:
            return MemoryDataset([1, 2, 3, 4]).get_sample(index)

    loader = DataLoader(Confused(), SequentialSampler(4, 2), StackCollator(), seed=0)
    with pytest.raises(TypeError, match="returned a coroutine; declare get_sample with async def"):
        async with loader.stream(0, 1) as batches:
            await batches.__anext__()


def test_a_sampler_larger_than_the_dataset_is_refused() -> None:
    with pytest.raises(ValueError, match=r"at most len\(dataset\) = 8 items but .*n=9"):
        DataLoader(MemoryDataset(make_samples(8)), SequentialSampler(9, 3), StackCollator(), seed=0)


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (np.array([0.0, 1.0]), "returned 1-D float64 array"),
        ([0, 1], "returned list"),
        (np.array([0, 99]), r"must be in \[0, len\(dataset\)\) = \[0, 8\) but .* gave 99"),
    ],
)
async def test_a_custom_sampler_must_return_valid_indices(returned: Any, message: str) -> None:
    class Custom:
        steps_per_epoch = 4

        def indices(self, seed: int, epoch: int, step: int) -> Any:
            return returned

        def __repr__(self) -> str:
            return "Custom()"

    loader = DataLoader(MemoryDataset(make_samples(8)), Custom(), StackCollator(), seed=0)
    with pytest.raises((TypeError, IndexError), match=message):
        async with loader.stream(0, 1) as batches:
            await batches.__anext__()


def test_a_huge_prefetch_is_refused_cleanly() -> None:
    with pytest.raises(ValueError, match=r"^prefetch must be an integer in \[1, 65536\] but"):
        DataLoader(
            MemoryDataset(make_samples(8)),
            SequentialSampler(8, 2),
            StackCollator(),
            seed=0,
            prefetch=2**62,
        )


async def test_failures_are_logged_without_asyncio_noise(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    loader = DataLoader(
        FailingDataset(Waits(make_samples(16)), {3, 5, 6}),
        SequentialSampler(16, 8),
        StackCollator(),
        seed=0,
    )

    async def consume() -> None:
        async with loader.stream(0, 2) as batches:
            async for _ in batches:
                pass

    with pytest.raises(OSError, match="index 3"):
        await consume()
    gc.collect()
    messages = [(r.name, r.getMessage()) for r in caplog.records]
    assert (
        "aioloader",
        "aioloader: global step 0 failed: OSError('injected failure reading index 3')",
    ) in messages
    assert not [m for name, m in messages if "never retrieved" in m]


def test_every_batch_supports_with_and_keeps_its_step_after_release() -> None:
    from aioloader.core import TreeCollator, plan_batch

    plan = plan_batch(SequentialSampler(4, 2), 0, 1)
    tree = TreeCollator()([{"x": 1}, {"x": 2}], plan)
    with tree as entered:
        assert entered is tree
    arrays = StackCollator()(make_samples(2), plan)
    with arrays:
        pass
    pool = BufferPool()
    images = ImageBatchCollator(4, pool=pool)(line_images(2, seed=0)._samples, plan)
    with images:
        pass
    assert (images.global_step, images.epoch, images.step) == (1, 0, 1)


@takes_plan
def _collate_lists(samples: Sequence[Any], plan: BatchPlan) -> list[Any]:
    return list(samples)
