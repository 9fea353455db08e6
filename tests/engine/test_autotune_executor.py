"""workers="auto" chooses the executor: builds that hold the GIL move to worker processes,
threads come back when they release it, and the batches never change.

The clocks are the test's (autotune_helpers.GilClocks): a build on a thread costs wall time
and, while the "GIL" is held, no CPU time; the training step costs one second; builds in
worker processes touch no clock. So every decision falls at the same step on every backend,
with no sleep and no real timing.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
from collections.abc import Iterator
from typing import Any

import pytest

from aioloader import AutoTune, takes_rng
from aioloader.core import SampleRng, ShuffledSampler, digest_batch
from aioloader.engine import DataLoader
from aioloader.testing import MemoryDataset
from tests.engine.autotune_helpers import (
    CLOCKS,
    ClockedJitter,
    GilClocks,
    Unpicklable,
    stack_with_step,
)
from tests.engine.helpers import jitter, make_samples
from tests.engine.process_helpers import spawned_children

pytestmark = pytest.mark.anyio
SEED = 7
N, BATCH = 37, 5


@pytest.fixture(autouse=True)
def no_process_left() -> Iterator[None]:
    """Every test leaves no worker process behind."""
    before = spawned_children()
    yield
    gc.collect()
    assert spawned_children() - before == set()
    assert multiprocessing.active_children() == []


@pytest.fixture
def clocks(request: pytest.FixtureRequest) -> Iterator[GilClocks]:
    """GIL-bound clocks under the test's name, one clock second a sample built on a thread."""
    made = GilClocks(cost=1.0)
    CLOCKS[request.node.name] = made
    yield made
    del CLOCKS[request.node.name]


def make_loader(transform: Any, samples: list[Any] | None = None, **options: Any) -> Any:
    return DataLoader(
        MemoryDataset(make_samples(N) if samples is None else samples),
        ShuffledSampler(N, BATCH, drop_last=False),
        stack_with_step,
        seed=SEED,
        transform=transform,
        **options,
    )


def tuned(clocks: GilClocks) -> AutoTune:
    """2 threads or 2 processes; a window every 4 steps; every busy thread counts."""
    return AutoTune(
        max_workers=2,
        max_processes=2,
        cores=4,
        every=4,
        min_window=0.0,
        wait_share=0.0,
        min_busy_threads=0.0,
        probe_every=2,
        clock=clocks.wall,
        cpu_clock=clocks.cpu,
    )


async def reference(stop: int) -> list[str]:
    """The digests of workers=0."""
    loader = make_loader(ClockedJitter("none"), workers=0)
    async with loader.stream(0, stop) as batches:
        return [digest_batch(batch) async for batch in batches]


def executor_moves(loader: Any) -> list[tuple[int, int, int]]:
    return [(d.step, d.old, d.new) for d in loader.statistics().decisions if d.knob == "processes"]


async def test_auto_moves_to_processes_and_back_with_the_batches_of_workers_0(
    clocks: GilClocks, request: pytest.FixtureRequest
) -> None:
    loader = make_loader(
        ClockedJitter(request.node.name), workers="auto", prefetch=2, autotune=tuned(clocks)
    )
    got = []
    try:
        async with loader.stream(0, 80) as batches:
            async for batch in batches:
                got.append(digest_batch(batch))
                clocks.advance(1.0)  # the training step
                if clocks.gil and len(executor_moves(loader)) == 3:
                    clocks.release_gil()  # the builds change: threads can scale now
        stats = loader.statistics()
    finally:
        await loader.aclose()
    assert got == await reference(80)
    # steps 4-12: two windows hold the GIL, processes on trial; kept at 20, threads probed
    # at 24 (2 windows), slower at 32: back; at 44 probed again, now as fast: they stay
    assert executor_moves(loader) == [(12, 0, 2), (24, 2, 0), (32, 0, 2), (44, 2, 0)]
    reasons = [d.reason for d in stats.decisions if d.knob == "processes"]
    assert reasons[0].startswith("builds hold the GIL: ")
    assert reasons[1] == "2 windows on processes: threads on trial against 1 steps/s"
    assert reasons[2].startswith("0.")
    assert reasons[2].endswith(" steps/s on threads < 0.95 on 2 processes: back")
    assert reasons[3] == reasons[1]
    assert (stats.executor, stats.executor_switches, stats.processes_refused) == ("thread", 4, None)
    assert stats.knobs is not None
    assert stats.knobs.processes == 0
    assert stats.processes is not None
    assert stats.processes.workers == 2
    assert 0 < stats.processes.batches_built < 80
    assert stats.batches_delivered == 80


async def test_a_transform_that_does_not_pickle_keeps_auto_on_threads_and_says_so(
    clocks: GilClocks, caplog: pytest.LogCaptureFixture
) -> None:
    @takes_rng
    def local(sample: Any, rng: SampleRng) -> Any:  # a local function: it cannot pickle
        clocks.build()
        return jitter(sample, rng)

    loader = make_loader(local, workers="auto", prefetch=2, autotune=tuned(clocks))
    got = []
    with caplog.at_level(logging.WARNING, logger="aioloader"):
        async with loader.stream(0, 40) as batches:
            async for batch in batches:
                got.append(digest_batch(batch))
                clocks.advance(1.0)
    assert got == await reference(40)
    stats = loader.statistics()
    moves = executor_moves(loader)
    assert len(moves) == 2
    assert moves[0] == (12, 0, 2)
    assert moves[1][1:] == (2, 0)  # the step that found out went back to threads
    assert stats.processes_refused is not None
    assert stats.processes_refused.startswith("TypeError: transform and collator must pickle")
    assert (stats.executor, stats.executor_switches, stats.processes) == ("thread", 2, None)
    said = [r.getMessage() for r in caplog.records if "stays on threads" in r.getMessage()]
    assert len(said) == 1
    assert "worker processes cannot build these steps (TypeError: " in said[0]


async def test_samples_that_do_not_pickle_are_built_on_threads_and_keep_auto_there(
    clocks: GilClocks, request: pytest.FixtureRequest
) -> None:
    samples = [Unpicklable(values) for values in make_samples(N)]
    loader = make_loader(
        ClockedJitter(request.node.name),
        samples,
        workers="auto",
        prefetch=2,
        autotune=tuned(clocks),
    )
    got = []
    try:
        async with loader.stream(0, 40) as batches:
            async for batch in batches:
                got.append(digest_batch(batch))
                clocks.advance(1.0)
        stats = loader.statistics()
    finally:
        await loader.aclose()
    assert got == await reference(40)  # each step once, the failed one built on threads
    moves = executor_moves(loader)
    assert len(moves) == 2
    assert moves[0] == (12, 0, 2)
    assert moves[1][1:] == (2, 0)
    assert stats.processes_refused is not None
    assert "pickle" in stats.processes_refused
    assert stats.executor == "thread"
    assert stats.processes is not None
    assert stats.processes.batches_built == 0
    assert stats.batches_delivered == 40
