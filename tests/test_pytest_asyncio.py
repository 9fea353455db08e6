"""pytest-asyncio: a loader shared by tests through async fixtures of module and session scope.

The pattern the README's "Testing your own code" shows. A fixture's event loop is its
``loop_scope``; a test that uses the fixture must run on that same loop, so it is marked
with the same ``loop_scope`` (a loader's stream, limiters and tasks cannot cross loops).
pytest-asyncio runs a fixture's setup and teardown in different tasks, so a fixture may
share a loader but not an open ``async with loader.stream()``: anyio's task groups must be
left in the task that entered them. Open streams inside the test. The ``aioloader.testing``
doubles work in such fixtures. anyio's plugin runs the ``@pytest.mark.anyio`` tests beside
these, under ``filterwarnings = error``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from aioloader import DataLoader, Sampler, SequentialSampler, ShuffledSampler
from aioloader.testing import (
    ArrayBatch,
    FailingDataset,
    MemoryDataset,
    SlowDataset,
    StackCollator,
    check_dataset_async,
)

ITEMS = 64
BATCH = 8
SEED = 5

Loader = DataLoader[Any, ArrayBatch]


def expected_batch(sampler: Sampler, global_step: int) -> list[int]:
    """What step ``global_step`` holds: the dataset is ``10 * index``."""
    epoch, step = divmod(global_step, sampler.steps_per_epoch)
    return [10 * int(i) for i in sampler.indices(SEED, epoch, step)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slow_loader() -> AsyncIterator[Loader]:
    """One loader for the module, over a slow dataset checked on the module's loop."""
    dataset: SlowDataset[np.int64] = SlowDataset(
        MemoryDataset([np.int64(10 * i) for i in range(ITEMS)]), 0.001
    )
    await check_dataset_async(dataset)
    yield DataLoader(dataset, ShuffledSampler(ITEMS, BATCH), StackCollator(), seed=SEED)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def session_loader() -> AsyncIterator[Loader]:
    """A loader built once for the whole session, on the session's loop."""
    dataset = MemoryDataset([np.int64(i) for i in range(ITEMS)])
    await check_dataset_async(dataset, [0, ITEMS - 1])
    yield DataLoader(dataset, SequentialSampler(ITEMS, BATCH), StackCollator(), seed=0)


@pytest.mark.asyncio(loop_scope="module")
async def test_module_loader_gives_exact_batches(slow_loader: Loader) -> None:
    sampler = slow_loader.sampler
    async with slow_loader.stream(6, 10) as batches:
        got = [(batch.global_step, batch.data.tolist()) async for batch in batches]
    assert got == [(g, expected_batch(sampler, g)) for g in range(6, 10)]


@pytest.mark.asyncio(loop_scope="module")
async def test_module_loader_is_shared(slow_loader: Loader) -> None:
    assert slow_loader.dataset.reads > 0  # read by the fixture's check and other tests
    steps = slow_loader.steps_per_epoch
    end_of_epoch = (slow_loader.next_step // steps + 1) * steps
    async for batch in slow_loader:  # the rest of the cursor's epoch; the cursor moves
        assert batch.data.tolist() == expected_batch(slow_loader.sampler, batch.global_step)
    assert slow_loader.next_step == end_of_epoch


@pytest.mark.asyncio(loop_scope="module")
async def test_module_loop_is_the_fixtures_loop(slow_loader: Loader) -> None:
    async with slow_loader.stream(100) as batches:  # endless; leaving the block cancels it
        async for batch in batches:
            assert batch.data.tolist() == expected_batch(slow_loader.sampler, batch.global_step)
            if batch.global_step == 103:
                break
    assert slow_loader.dataset.peak_in_flight > 1  # reads overlapped on this loop


@pytest.mark.asyncio(loop_scope="session")
async def test_session_loader(session_loader: Loader) -> None:
    async with session_loader.stream(0, 2) as batches:
        assert [b.data.tolist() async for b in batches] == [list(range(8)), list(range(8, 16))]


@pytest.mark.asyncio
async def test_failing_double_in_a_function_loop() -> None:
    dataset: FailingDataset[int] = FailingDataset(MemoryDataset(list(range(16))), {11})
    loader = DataLoader(dataset, SequentialSampler(16, 4), StackCollator(), seed=0)
    with pytest.raises(OSError, match=r"^injected failure reading index 11") as info:
        async for _ in loader:
            pass
    notes = getattr(info.value, "__notes__", [])
    assert any("global step 2" in note for note in notes)


@pytest.mark.asyncio
async def test_check_dataset_async_finds_a_nondeterministic_dataset() -> None:
    class Drifting(MemoryDataset[int]):
        calls = 0

        async def get_sample(self, index: int) -> int:
            self.calls += 1
            return self.calls

    with pytest.raises(ValueError, match=r"^dataset returned different samples for index 0$"):
        await check_dataset_async(Drifting([0, 0]))
