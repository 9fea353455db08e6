"""aioloader.engine._feed: steps keep being built while the consumer's step holds the loop.

A consumer of ``async for`` whose own step blocks the event loop (a training step) must not
stop the builders: the step a take lets into the ring's window is started by the take
itself, built by worker processes or build threads, and received without the loop.
"""

from __future__ import annotations

import gc
import multiprocessing
import signal
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from aioloader import WorkerDiedError
from aioloader.core import (
    BufferPool,
    GainOffset,
    ImageBatchCollator,
    SequentialSampler,
    ShuffledSampler,
    digest_batch,
)
from aioloader.datasets import line_images
from aioloader.engine import DataLoader
from aioloader.testing import StackCollator
from tests.engine.helpers import jitter, make_samples
from tests.engine.process_helpers import Crash, dict_collator, rows, spawned_children
from tests.engine.receiver_helpers import ARRIVALS, BATCH, FailsAt, mark

pytestmark = pytest.mark.anyio
EXECUTORS = ["thread", "process"]
GENEROUS = 60.0
"""Seconds a blocked consumer waits for a step (the old engine never delivers it)."""


def _build_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("aioloader-build")]


@pytest.fixture(autouse=True)
def nothing_left() -> Iterator[None]:
    """Every test leaves no worker process and no build thread behind."""
    before = spawned_children()
    yield
    gc.collect()
    assert spawned_children() - before == set()
    assert multiprocessing.active_children() == []
    assert _build_threads() == []


def _loader(executor: str, n: int, **options: Any) -> DataLoader[Any, Any]:
    return DataLoader(
        list(range(n)),
        SequentialSampler(n, BATCH),
        mark,
        seed=0,
        workers=2,
        executor=executor,
        **options,
    )


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_steps_are_built_while_the_consumer_holds_the_loop(executor: str) -> None:
    """After taking step g, the consumer blocks the event loop until the batch of step
    g + prefetch (the one that take let in) has been built and received: only a take that
    starts that step without the loop lets the consumer go on."""
    prefetch, steps = 3, 10
    ARRIVALS.reset()
    loader = _loader(executor, steps * BATCH, prefetch=prefetch)
    seen = []
    try:
        async for batch in loader:
            seen.append(batch.step)
            wanted = batch.step + prefetch
            if wanted < steps:
                assert ARRIVALS.wait_for(wanted, GENEROUS), f"step {wanted} was never built"
    finally:
        await loader.aclose()
    assert seen == list(range(steps))


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_the_sync_facade_gives_the_same_steps(executor: str) -> None:
    """``for`` (the sync facade, whose loop is its own) gives the same steps."""
    loader = _loader(executor, 6 * BATCH, prefetch=2)
    try:
        steps = await anyio.to_thread.run_sync(lambda: [b.step for b in loader.iter_sync(0, 6)])
    finally:
        await loader.aclose()
    assert steps == list(range(6))


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_the_batches_are_those_of_workers_0(executor: str) -> None:
    def loader(**options: Any) -> DataLoader[Any, Any]:
        return DataLoader(
            make_samples(37),
            ShuffledSampler(37, 4),
            StackCollator(),
            seed=5,
            transform=jitter,
            **options,
        )

    async def digests(loader: DataLoader[Any, Any]) -> list[str]:
        try:
            async with loader.stream(0, 20) as batches:  # crosses two epochs
                return [digest_batch(batch) async for batch in batches]
        finally:
            await loader.aclose()

    plain = await digests(loader())
    fed = await digests(loader(workers=3, prefetch=4, executor=executor))
    assert fed == plain
    assert len(set(plain)) == 20
    sync = loader(workers=3, prefetch=4, executor=executor)
    try:
        fed_sync = await anyio.to_thread.run_sync(
            lambda: [digest_batch(batch) for batch in sync.iter_sync(0, 20)]
        )
    finally:
        await sync.aclose()
    assert fed_sync == plain


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_a_read_error_arrives_at_its_step_with_its_note(executor: str) -> None:
    loader: DataLoader[Any, Any] = DataLoader(
        FailsAt(40, bad=22), SequentialSampler(40, 4), StackCollator(), seed=0, workers=2,
        prefetch=4, executor=executor,
    )  # fmt: skip
    seen: list[int] = []

    async def consume() -> None:
        async with loader.stream(0, 10) as batches:
            async for batch in batches:
                seen.append(batch.global_step)

    try:
        with pytest.raises(OSError, match="injected failure reading index 22") as info:
            await consume()
    finally:
        await loader.aclose()
    assert seen == [0, 1, 2, 3, 4]
    assert (
        "aioloader: while building global step 5 (epoch 0, step 5), slot 2, dataset index 22"
        in info.value.__notes__  # type: ignore[attr-defined]
    )


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_leaving_early_or_cancelling_leaves_no_thread_and_no_batch(executor: str) -> None:
    pool = BufferPool()
    images = line_images(64, seed=3)
    loader: DataLoader[Any, Any] = DataLoader(
        [await images.get_sample(index) for index in range(64)],  # a sync dataset
        ShuffledSampler(64, 8),
        ImageBatchCollator(4, augment=GainOffset(), pool=pool),
        seed=1, workers=2, prefetch=4, executor=executor,
    )  # fmt: skip
    try:
        for _ in range(5):
            async for batch in loader:  # a bare loop, left at once
                batch.release()
                break
            async with loader.stream(0, None) as batches:
                async for batch in batches:
                    batch.release()
                    if batch.global_step == 2:
                        break
            with anyio.move_on_after(GENEROUS) as scope:
                async with loader.stream(0, None) as batches:
                    async for batch in batches:
                        batch.release()
                        if batch.global_step == 1:
                            scope.cancel()
            assert scope.cancelled_caught
        await loader.aclose_streams()
        gc.collect()
        if executor == "thread":
            assert pool.statistics().buffers_out == 0
        # the workers that built steps nobody took serve the next stream in order
        async with loader.stream(0, 6) as batches:
            got = []
            async for batch in batches:
                got.append(batch.global_step)
                batch.release()
        assert got == list(range(6))
    finally:
        await loader.aclose()


@pytest.mark.parametrize(("how", "code"), [("exit", 3), ("kill", -signal.SIGKILL)])
async def test_a_dead_worker_fails_its_step_and_the_next_stream_has_new_ones(
    how: str, code: int
) -> None:
    loader: DataLoader[Any, Any] = DataLoader(
        rows(40), SequentialSampler(40, 4), dict_collator, seed=0,
        transform=Crash(how, 21.0), executor="process", workers=2, prefetch=3,
    )  # fmt: skip
    seen: list[int] = []

    async def consume(stop: int) -> None:
        async with loader.stream(0, stop) as batches:
            async for batch in batches:
                seen.append(batch["step"])

    try:
        with pytest.raises(WorkerDiedError) as info:
            await consume(10)  # sample 21.0 is in step 5
        assert seen == list(range(len(seen)))
        assert len(seen) <= 5
        assert info.value.exitcode == code
        assert f"build worker {info.value.worker} (pid " in str(info.value)
        seen.clear()
        await consume(5)  # the steps before the crash, from fresh workers
        assert seen == list(range(5))
    finally:
        await loader.aclose()
