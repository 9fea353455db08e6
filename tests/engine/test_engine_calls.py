"""The engine's own Python work per step and per sample at ``workers=0`` (issue 34, item 6).

Every Python function call made while a loader delivers its batches is counted
(``sys.setprofile`` and ``threading.setprofile``; a coroutine resumed counts as a call),
except the calls of the user's dataset, transform and collator and all they call. The
count of a stream of ``LONG`` steps less that of ``SHORT`` steps is the cost of
``LONG - SHORT`` steps, without the stream's start and end. A step costs a bounded number
of calls whatever its size: a larger batch adds no call per sample. The bounds hold with a
margin for the event loop's turns, which vary with timing.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import Any

import numpy as np
import pytest

from aioloader import DataLoader, ShuffledSampler
from aioloader.core import GainOffset, ImageBatchCollator, ImageSample
from aioloader.engine import _reads as engine_reads
from aioloader.kernels import _selection as _backend

SHORT, LONG = 4, 20
ITEMS = 4096
# Calls per step of 32 samples at workers=0, from a list (read inline) and from an async
# get_sample that returns at once. Measured: asyncio 103-104, uvloop 86-87, trio 116-131,
# the sync facade 95-114 (c5a98dd: 130-161, 112-144, 153-182, 128-159). Trio's run queue
# makes its count vary: 110-138 here in 8 runs, 147.1 once in a clean-clone CI run with
# coverage, so its bound only catches a step that grows a lot.
STEP_BOUND = {"asyncio": 120, "asyncio+uvloop": 100, "trio": 165}
SYNC_STEP_BOUND = 122  # the sync facade (iter_sync, asyncio with uvloop)
# Calls per sample, with the reads' slice of the loop frozen (``timeless_reads``): a list's
# reads make none (c5a98dd: 1, a check for a coroutine), an async read none either; measured
# 0.02-0.06 and 0.10-0.17 (trio shuffles its run queue, so its counts vary from run to run).
SAMPLE_BOUND = {"sync": 0.25, "async": 0.3}
# Calls per step of 8 small images through W1's collator (GainOffset, width multiple 4) at
# workers=0, numpy kernels. Measured: asyncio 185.9, uvloop 168.6, trio 212-213 (cf4f91d:
# 194.9, 177.6, 198-217, where each integer check of a step's random keys made a call;
# c550951: 183.9, 166.6, 200-207). Trio's run queue makes its count vary, so its bound only
# catches a step that grows a lot.
IMAGES = 256
IMAGE_STEP_BOUND = {"asyncio": 190, "asyncio+uvloop": 173, "trio": 235}


def transform(sample: int) -> int:
    return sample + 1


def collate(samples: Sequence[int]) -> int:
    return len(samples)


class AsyncInts:
    """An async dataset whose ``get_sample`` returns at once."""

    def __init__(self, n: int) -> None:
        self.items = list(range(n))

    def __len__(self) -> int:
        return len(self.items)

    async def get_sample(self, index: int) -> int:
        return self.items[index]


USER: set[CodeType] = {transform.__code__, collate.__code__, AsyncInts.get_sample.__code__}


@contextmanager
def counting(driver: Callable[..., Any]) -> Iterator[list[int]]:
    """Count the calls made inside the block, on every thread, outside ``USER`` code and
    the test's own ``driver``."""
    count = [0]
    lock = threading.Lock()
    skip = driver.__code__

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call" or frame.f_code is skip:
            return
        walk: FrameType | None = frame
        while walk is not None:
            if walk.f_code in USER:
                return
            walk = walk.f_back
        with lock:
            count[0] += 1

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        yield count
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


def make_loader(kind: str, batch: int) -> DataLoader[Any, Any]:
    dataset: Any = AsyncInts(ITEMS) if kind == "async" else list(range(ITEMS))
    return DataLoader(
        dataset, ShuffledSampler(ITEMS, batch), collate, seed=3, transform=transform, workers=0
    )


@pytest.fixture(autouse=True)
def numpy_kernels() -> Iterator[None]:
    """Nothing loads the compiled kernels meanwhile (a load makes thousands of calls)."""
    with _backend.use_kernels("numpy"):
        yield


@pytest.fixture(autouse=True)
def timeless_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads that complete at once never spend their slice of the loop: a slice is time, so
    its turns would make the count depend on the machine's speed (and the profiler's)."""
    monkeypatch.setattr(engine_reads, "clock", lambda: 0.0)


def backend_name(anyio_backend: Any) -> str:
    name, options = anyio_backend if isinstance(anyio_backend, tuple) else (anyio_backend, {})
    return f"{name}+uvloop" if options.get("use_uvloop") else str(name)


async def stream_calls(kind: str, batch: int, steps: int) -> int:
    loader = make_loader(kind, batch)
    async with loader.stream(0, 2) as warm:  # the first epoch's order, imports
        async for _ in warm:
            pass
    with counting(stream_calls) as count:
        async with loader.stream(0, steps) as batches:
            async for _ in batches:
                pass
    return count[0]


def sync_calls(kind: str, batch: int, steps: int) -> int:
    loader = make_loader(kind, batch)
    for _ in loader.iter_sync(0, 2):
        pass
    with counting(sync_calls) as count:
        for _ in loader.iter_sync(0, steps):
            pass
    return count[0]


async def async_step(kind: str, batch: int) -> float:
    return (await stream_calls(kind, batch, LONG) - await stream_calls(kind, batch, SHORT)) / (
        LONG - SHORT
    )


def sync_step(kind: str, batch: int) -> float:
    return (sync_calls(kind, batch, LONG) - sync_calls(kind, batch, SHORT)) / (LONG - SHORT)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_async_for_at_workers_0_costs_a_bounded_number_of_calls_per_step(
    kind: str, anyio_backend: Any
) -> None:
    small, large = await async_step(kind, 32), await async_step(kind, 256)
    bound = STEP_BOUND[backend_name(anyio_backend)]
    assert small <= bound, f"{small} calls per step of 32 samples (bound {bound})"
    per_sample = (large - small) / (256 - 32)
    assert per_sample <= SAMPLE_BOUND[kind], f"{per_sample} calls per sample ({small}, {large})"


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_the_sync_facade_at_workers_0_costs_a_bounded_number_of_calls_per_step(
    kind: str,
) -> None:
    small, large = sync_step(kind, 32), sync_step(kind, 256)
    assert small <= SYNC_STEP_BOUND, f"{small} calls per step (bound {SYNC_STEP_BOUND})"
    per_sample = (large - small) / (256 - 32)
    assert per_sample <= SAMPLE_BOUND[kind], f"{per_sample} calls per sample ({small}, {large})"


async def image_stream_calls(steps: int) -> int:
    samples = [
        ImageSample(
            np.full((1, 8, 8 + i % 9), i, np.float32),
            np.arange(1, 2 + i % 4, dtype=np.int32),
            i % 10,
        )
        for i in range(IMAGES)
    ]  # one epoch holds every step counted
    collator = ImageBatchCollator(4, augment=GainOffset())
    loader = DataLoader(samples, ShuffledSampler(IMAGES, 8), collator, seed=3, workers=0)
    async with loader.stream(0, 2) as warm:
        async for batch in warm:
            batch.release()
    with counting(image_stream_calls) as count:
        async with loader.stream(0, steps) as batches:
            async for batch in batches:
                batch.release()
    return count[0]


@pytest.mark.anyio
async def test_an_image_step_at_workers_0_costs_a_bounded_number_of_calls(
    anyio_backend: Any,
) -> None:
    """W1's step: the planner's and collator's integer checks make no call when given ints."""
    step = (await image_stream_calls(LONG) - await image_stream_calls(SHORT)) / (LONG - SHORT)
    bound = IMAGE_STEP_BOUND[backend_name(anyio_backend)]
    assert step <= bound, f"{step} calls per step of 8 images (bound {bound})"
