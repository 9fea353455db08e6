"""Cancellation storms: consumers cancelled at random points leak nothing and never hang."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Sequence
from typing import Any

import anyio
import numpy as np
import pytest

from aioloader import takes_plan
from aioloader.core import BatchPlan, BufferPool, GainOffset, ImageBatchCollator, ShuffledSampler
from aioloader.datasets import line_images
from aioloader.engine import DataLoader
from aioloader.testing import SlowDataset

pytestmark = pytest.mark.anyio

CONSUMERS = 1000


@takes_plan
class SlowCollator:
    """The image collator with a pause first, so cancellations land mid-collation too."""

    def __init__(self, inner: ImageBatchCollator, spin: int) -> None:
        self._inner = inner
        self._spin = spin

    def __call__(self, samples: Sequence[Any], plan: BatchPlan) -> Any:
        total = np.float64(0)
        for _ in range(self._spin):  # CPU work in the worker thread (no sleep)
            total += np.float64(1)
        return self._inner(samples, plan)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


@pytest.mark.slow  # a soak
async def test_a_thousand_cancelled_consumers_leak_nothing() -> None:
    pool = BufferPool()
    dataset: SlowDataset[Any] = SlowDataset(
        line_images(count=64, height=4, min_width=4, max_width=16), 0.002
    )
    chooser = random.Random(20261129)
    loaders = [
        DataLoader(
            dataset,
            ShuffledSampler(64, 8),
            SlowCollator(ImageBatchCollator(4, augment=GainOffset(), pool=pool), spin=200),
            seed=7,
            workers=workers,
            prefetch=prefetch,
            max_inflight_reads=16,
        )
        for workers, prefetch in ((0, 1), (1, 4), (2, 8))
    ]
    threads_before, fds_before = threading.active_count(), _open_fds()
    tasks_before = _tasks()
    delivered = 0
    with anyio.fail_after(120):  # no deadlock: the whole storm ends in bounded time
        for round_index in range(CONSUMERS):
            loader = chooser.choice(loaders)
            delay = chooser.uniform(0, 0.006)
            if round_index % 100 == 0:  # these rounds deliver even on a busy machine
                delay = 1.0
            delivered += await _one_round(loader, delay, chooser.randint(0, 6))
    assert delivered > 0
    assert dataset.in_flight == 0
    assert pool.statistics().buffers_out == 0
    for loader in loaders:
        assert loader.statistics().reads_in_flight == 0
    # anyio keeps idle worker threads for reuse: at most the 2 of the widest loader remain.
    assert threading.active_count() <= threads_before + 2
    assert _open_fds() <= fds_before
    assert _tasks() == tasks_before


async def _one_round(loader: DataLoader[Any, Any], delay: float, stop_after: int) -> int:
    got = 0
    with anyio.move_on_after(delay):
        async with loader.stream(chooser_start(loader), None) as batches:
            async for batch in batches:
                batch.release()
                got += 1
                if got > stop_after:
                    break
    return got


def chooser_start(loader: DataLoader[Any, Any]) -> int:
    return loader.next_step % 1000


def _tasks() -> set[Any]:
    """Every task of an asyncio loop (trio's nurseries make a stray task impossible)."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return set()
    return set(asyncio.all_tasks())
