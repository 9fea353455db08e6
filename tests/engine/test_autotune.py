"""workers="auto" / prefetch="auto": batches never change, decisions react to the load.

The measurements run on an injected clock that only the test's dataset, transform and
"training" advance, so every decision falls at the same step on every backend. They tune
threads, ring and reads only (``processes=False``): test_autotune_executor.py covers the
executor.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from aioloader import AutoTune, takes_rng
from aioloader.core import SampleRng, ShuffledSampler
from aioloader.core._autotune import Knobs
from aioloader.engine import DataLoader
from aioloader.testing import MemoryDataset

from .helpers import TrackingCollator, digests, jitter, make_samples
from .test_loader import SEED, collect, make_loader, reference_digests

pytestmark = pytest.mark.anyio


class FakeClock:
    """Seconds that pass only when somebody calls ``advance`` (thread-safe)."""

    def __init__(self) -> None:
        self._now = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


class TickingClock(FakeClock):
    """Each reading is one second later than the last: every window looks starved."""

    def __call__(self) -> float:
        self.advance(1.0)
        return super().__call__()


class SlowAfterDataset:
    """Reads cost nothing until ``slow`` is set, then ``cost`` clock seconds each."""

    def __init__(self, clock: FakeClock, cost: float) -> None:
        self.samples = make_samples(37)
        self.clock = clock
        self.cost = cost
        self.slow = False

    def __len__(self) -> int:
        return len(self.samples)

    async def get_sample(self, index: int) -> npt.NDArray[np.float32]:
        if self.slow:
            self.clock.advance(self.cost)
        return self.samples[index]


async def test_auto_batches_equal_fixed_settings_while_knobs_change() -> None:
    clock = TickingClock()
    tune = AutoTune(
        max_workers=4, max_prefetch=16, max_inflight_reads=8, every=1, clock=clock, processes=False
    )
    loader = make_loader(workers="auto", prefetch="auto", max_inflight_reads=2, autotune=tune)
    assert (loader.workers, loader.prefetch) == (4, 8)  # the most threads, 2 steps each
    batches = await collect(loader, 3, 80)
    fixed = await collect(make_loader(workers=2, prefetch=4), 3, 80)
    assert digests(batches) == digests(fixed) == reference_digests(37, 5, 3, 80)
    stats = loader.statistics()
    assert len(stats.decisions) >= 3
    assert {d.knob for d in stats.decisions} >= {"workers"}
    assert [d.step for d in stats.decisions] == sorted(d.step for d in stats.decisions)
    assert all(d.old != d.new for d in stats.decisions)


async def test_slow_reads_after_step_k_deepen_the_ring() -> None:
    clock = FakeClock()
    dataset = SlowAfterDataset(clock, cost=1.0)
    tune = AutoTune(max_prefetch=8, every=4, clock=clock, processes=False)
    loader = make_loader(dataset=dataset, workers=0, prefetch="auto", autotune=tune)
    got = []
    async with loader.stream(0, 24) as batches:
        async for batch in batches:
            got.append(batch)
            clock.advance(1.0)  # the training step
            if batch.global_step == 9:
                dataset.slow = True
    assert digests(got) == reference_digests(37, 5, 0, 24)
    decisions = loader.statistics().decisions
    assert decisions[0].step == 12
    assert (decisions[0].knob, decisions[0].old, decisions[0].new) == ("prefetch", 2, 4)
    assert "read" in decisions[0].reason
    assert "> build" in decisions[0].reason
    assert all(d.step > 9 for d in decisions)


def gil_like_loader(clock: FakeClock, in_thread: float, max_workers: int) -> DataLoader[Any, Any]:
    """A loader whose transform costs ``in_thread`` clock seconds a sample in a build thread
    and 1.0 built inline, one step in flight (``prefetch=1``)."""

    @takes_rng
    def transform(sample: npt.NDArray[np.float32], rng: SampleRng) -> Any:
        threaded = threading.current_thread().name.startswith("aioloader-build")
        clock.advance(in_thread if threaded else 1.0)
        return jitter(sample, rng)

    return DataLoader(
        MemoryDataset(make_samples(37)),
        ShuffledSampler(37, 5, drop_last=False),
        TrackingCollator(),
        seed=SEED,
        transform=transform,
        workers="auto",
        prefetch=1,
        autotune=AutoTune(
            max_workers=max_workers, every=4, wait_share=0.0, clock=clock, processes=False
        ),
    )


async def consume(loader: DataLoader[Any, Any], clock: FakeClock, stop: int) -> list[Any]:
    got = []
    async with loader.stream(0, stop) as batches:
        async for batch in batches:
            got.append(batch)
            clock.advance(1.0)  # the training step
    return got


async def test_builds_slower_in_threads_end_inline() -> None:
    clock = FakeClock()
    loader = gil_like_loader(clock, in_thread=3.0, max_workers=2)
    assert loader.workers == 2
    got = await consume(loader, clock, 40)
    assert digests(got) == reference_digests(37, 5, 0, 40)
    stats = loader.statistics()
    assert stats.knobs == Knobs(workers=0, prefetch=1, reads=64)
    # each trial starts from the threads the last one left, on the window after the first
    assert stats.decisions[0].step == 8
    current = 2
    for decision in stats.decisions:
        assert decision.knob == "workers"
        assert decision.old == current
        current = decision.new
    assert stats.decisions[-1].new == 0
    assert "on trial" in stats.decisions[-1].reason


async def test_builds_faster_in_threads_keep_threads() -> None:
    clock = FakeClock()
    loader = gil_like_loader(clock, in_thread=0.25, max_workers=2)
    got = await consume(loader, clock, 40)
    assert digests(got) == reference_digests(37, 5, 0, 40)
    stats = loader.statistics()
    assert stats.knobs is not None
    assert stats.knobs.workers >= 1
    back = [d for d in stats.decisions if d.old == 0]
    assert len(back) == 1  # building inline was tried once, measured slower, left
    assert back[0].reason.endswith(": back")
    assert "with 0 threads" in back[0].reason


async def test_tuned_knobs_carry_into_the_next_stream() -> None:
    clock = TickingClock()
    tune = AutoTune(max_workers=2, max_prefetch=4, every=1, clock=clock, processes=False)
    loader = make_loader(workers="auto", prefetch="auto", autotune=tune)
    await collect(loader, 0, 16)
    first = loader.statistics()
    knobs = first.knobs
    assert knobs is not None
    assert await collect(loader, 16, 24)
    after = loader.statistics()
    # the second stream starts from the tuned knobs: each later change starts where the
    # previous one (of the first stream included) left its knob; only threads shrink
    current = {"workers": knobs.workers, "prefetch": knobs.prefetch, "reads": knobs.reads}
    for decision in after.decisions[len(first.decisions) :]:
        assert decision.old == current[decision.knob]
        assert decision.knob == "workers" or decision.old < decision.new
        current[decision.knob] = decision.new
    assert after.knobs == Knobs(**current)
    # which knob a ticking clock favours depends on how threads interleave; the bounds do not
    assert 0 <= knobs.workers <= 2
    assert 4 <= knobs.prefetch <= 4


async def test_windows_shorter_than_min_window_are_never_judged() -> None:
    tune = AutoTune(
        max_workers=2, every=1, min_window=3600.0, clock=TickingClock(), processes=False
    )
    loader = make_loader(workers="auto", prefetch="auto", autotune=tune)
    assert digests(await collect(loader, 0, 24)) == reference_digests(37, 5, 0, 24)
    assert loader.statistics().decisions == ()
    assert loader.statistics().knobs == Knobs(2, 4, 64)


def test_auto_rejects_bad_combinations() -> None:
    with pytest.raises(ValueError, match="executor must be 'thread' but got 'process'"):
        make_loader(workers="auto", executor="process")
    with pytest.raises(ValueError, match="autotune needs workers='auto' or prefetch='auto'"):
        make_loader(workers=1, autotune=AutoTune())
    with pytest.raises(TypeError, match="autotune must be an AutoTune or None"):
        make_loader(workers="auto", autotune={"max_workers": 2})
    with pytest.raises(ValueError, match=r"AutoTune\.max_workers"):
        AutoTune(max_workers=0)
    with pytest.raises(ValueError, match=r"AutoTune.wait_share must be in \[0, 1\) but got 1.5"):
        AutoTune(wait_share=1.5)
    with pytest.raises(ValueError, match=r"AutoTune.min_window must be in \[0, 3600\] seconds"):
        AutoTune(min_window=-1.0)
