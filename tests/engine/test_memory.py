"""Memory in the engine: pooled batches are reused, and nothing grows over many batches."""

from __future__ import annotations

import tracemalloc
from typing import Any

import anyio
import numpy as np
import pytest

from aioloader.core import (
    BufferPool,
    GainOffset,
    ImageBatchCollator,
    ImageSample,
    ShuffledSampler,
)
from aioloader.datasets import line_images
from aioloader.engine import DataLoader
from aioloader.kernels import _selection as _backend
from aioloader.testing import MemoryDataset

pytestmark = pytest.mark.anyio


def make_loader(pool: BufferPool, workers: int) -> DataLoader[Any, Any]:
    return DataLoader(
        line_images(count=96, height=4, min_width=4, max_width=24),
        ShuffledSampler(96, 8),
        ImageBatchCollator(width_multiple=4, augment=GainOffset(), pool=pool),
        seed=3,
        workers=workers,
        prefetch=4,
    )


async def consume(loader: DataLoader[Any, Any], start: int, stop: int) -> None:
    async with loader.stream(start, stop) as batches:
        async for batch in batches:
            batch.release()


def uniform_images(count: int) -> MemoryDataset[ImageSample]:
    """Images and targets of one shape: every batch asks the pool for the same sizes."""
    return MemoryDataset(
        [
            ImageSample(np.full((1, 4, 12), i, np.float32), np.array([i, i], np.int32), i % 3)
            for i in range(count)
        ]
    )


@pytest.mark.parametrize(("workers", "prefetch"), [(0, 1), (2, 4)])
async def test_after_warm_up_every_buffer_is_a_pool_hit(workers: int, prefetch: int) -> None:
    pool = BufferPool()
    collator = ImageBatchCollator(width_multiple=4, augment=GainOffset(), pool=pool)
    loader = DataLoader(
        uniform_images(64),
        ShuffledSampler(64, 8),
        collator,
        seed=3,
        workers=workers,
        prefetch=prefetch,
    )
    await consume(loader, 0, 50)
    warm = pool.statistics()
    await consume(loader, 50, 550)
    after = pool.statistics()
    acquisitions = (after.hits + after.misses) - (warm.hits + warm.misses)
    assert acquisitions % 500 == 0  # the same number of arrays for every batch
    if workers == 0:
        assert after.misses == warm.misses  # no new buffer after warm-up
    else:  # at most one set of buffers per batch that can be alive at once
        assert after.misses <= (acquisitions // 500) * (prefetch + 2)
    assert after.buffers_out == 0


@pytest.mark.slow  # a soak
async def test_tracemalloc_shows_no_growth_over_2000_batches() -> None:
    # the kernels are loaded before the baseline: with a cold numba cache the background
    # compile would otherwise finish, and numba load its modules, inside the measured window
    await anyio.to_thread.run_sync(_backend.load)
    pool = BufferPool()
    loader = make_loader(pool, workers=1)
    await consume(loader, 0, 2500)  # warm-up: pool classes, numpy's caches, anyio's threads
    tracemalloc.start()
    try:
        await consume(loader, 2500, 2600)
        before, _ = tracemalloc.get_traced_memory()
        await consume(loader, 2600, 4600)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert pool.statistics().buffers_out == 0
    assert after - before < 16 * 1024, f"grew by {after - before} bytes over 2,000 batches"
