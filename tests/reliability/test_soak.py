"""Soak: many batches of the W1 line-image workload at workers=2; memory flat, pool hits only.

CI runs the short form; ``pytest -m long`` runs 100,000 batches and prints the figures.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import anyio
import pytest

from aioloader.core import BufferPool, GainOffset, ImageBatchCollator, ShuffledSampler
from aioloader.datasets import line_images
from aioloader.engine import DataLoader

WARM_UP = 600
PREFETCH = 8


@dataclass(frozen=True)
class SoakFigures:
    batches: int
    rss_growth_bytes: int
    window_hits: int
    window_misses: int
    total_misses: int
    thread_growth: int


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def soak(batches: int) -> SoakFigures:
    pool = BufferPool()
    loader = DataLoader(
        line_images(),
        ShuffledSampler(2048, 128),
        ImageBatchCollator(4, augment=GainOffset(), pool=pool),
        seed=11,
        workers=2,
        prefetch=PREFETCH,
    )

    async def consume(start: int, stop: int) -> None:
        async with loader.stream(start, stop) as stream:
            async for batch in stream:
                batch.release()

    async def run() -> SoakFigures:
        await consume(0, WARM_UP)
        rss, threads, warm = _rss_bytes(), threading.active_count(), pool.statistics()
        await consume(WARM_UP, WARM_UP + batches)
        after = pool.statistics()
        return SoakFigures(
            batches,
            _rss_bytes() - rss,
            after.hits - warm.hits,
            after.misses - warm.misses,
            after.misses,
            threading.active_count() - threads,
        )

    return anyio.run(run)


# Batches alive at once: the prefetch window plus the one the consumer holds; each batch
# holds two pooled buffers (images, and one int32 block for the small arrays).
BUFFER_BOUND = 2 * (PREFETCH + 1)


@pytest.mark.slow  # a soak
def test_soak_short() -> None:
    figures = soak(2_000)
    assert figures.total_misses <= BUFFER_BOUND  # the pool never grows past the bound
    assert figures.window_hits >= 2 * 2_000 - BUFFER_BOUND
    assert figures.thread_growth <= 0
    assert figures.rss_growth_bytes < 32 * 2**20, figures  # allocator noise, not leaks


@pytest.mark.long
def test_soak_long() -> None:
    figures = soak(100_000)
    print(figures)
    assert figures.total_misses <= BUFFER_BOUND
    assert figures.thread_growth <= 0
    assert figures.rss_growth_bytes < 32 * 2**20, figures  # allocator noise, not leaks
