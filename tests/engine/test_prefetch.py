"""``prefetch`` bounds what is prepared ahead of the batch the consumer holds, on every path
(async and sync, with and without build threads), and the statistics count what the
consumer received.

The consumer holds a batch and the test waits until the loader is quiet: nothing building,
nothing ready in the ring, every claimed step taken (a state it polls for, never a sleep it
trusts). Then the reads and builds are counted exactly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest

from aioloader import takes_plan
from aioloader.core import BatchPlan, SequentialSampler
from aioloader.engine import AutoTune, DataLoader, RingStatistics

SYNC_BACKENDS = [
    pytest.param("asyncio", {"use_uvloop": False}, id="asyncio"),
    pytest.param("asyncio", {"use_uvloop": True}, id="uvloop"),
    pytest.param("trio", {}, id="trio"),
]
PREFETCH = 4
BATCH = 5
QUIET_DEADLINE = 20.0  # seconds: a hang guard only; quiet comes in milliseconds


class CountingDataset:
    """Counts ``get_sample`` calls (made on the event loop's thread)."""

    def __init__(self, n: int) -> None:
        self.samples = [np.full(3, index, dtype=np.int64) for index in range(n)]
        self.reads = 0

    def __len__(self) -> int:
        return len(self.samples)

    async def get_sample(self, index: int) -> Any:
        self.reads += 1
        return self.samples[index]


@takes_plan
class CountingCollator:
    """Counts the steps it builds (in build threads or on the loop)."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, samples: Sequence[Any], plan: BatchPlan) -> Any:
        with self._lock:
            self.steps.append(plan.global_step)
        return np.stack(samples)


def make_loader(workers: int) -> tuple[DataLoader[Any, Any], CountingDataset, CountingCollator]:
    dataset, collator = CountingDataset(400), CountingCollator()
    loader = DataLoader(
        dataset,
        SequentialSampler(400, BATCH),
        collator,
        seed=0,
        workers=workers,
        prefetch=PREFETCH,
    )
    return loader, dataset, collator


def quiet(ring: RingStatistics | None, claimed: int) -> bool:
    """Nothing building or ready, every claimed step taken, at least ``claimed`` claimed."""
    assert ring is not None
    return (
        ring.building == 0
        and ring.ready == 0
        and ring.next_to_take == ring.next_to_claim >= claimed
    )


def wait_until_quiet(loader: DataLoader[Any, Any], claimed: int) -> RingStatistics:
    """Poll the ring from the consumer's thread until the loader has gone quiet."""
    deadline = time.monotonic() + QUIET_DEADLINE
    pause = threading.Event()
    while not quiet(ring := loader.statistics().ring, claimed):
        if time.monotonic() > deadline:
            raise AssertionError(f"the loader never went quiet: {ring}")
        pause.wait(0.001)
    assert ring is not None
    return ring


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(("backend", "options"), SYNC_BACKENDS)
def test_the_sync_facade_prepares_prefetch_steps_ahead_and_counts_what_was_received(
    backend: str, options: dict[str, Any], workers: int
) -> None:
    loader, dataset, collator = make_loader(workers)
    iterator = loader.iter_sync(backend=backend, backend_options=options)
    held = next(iterator)  # the consumer holds step 0 and takes nothing more
    assert held[:, 0].tolist() == [0, 1, 2, 3, 4]
    ring = wait_until_quiet(loader, 1 + PREFETCH)
    # steps 1..4 handed off (lent), none claimed past them: prefetch steps ahead, not 2x
    assert ring == RingStatistics(
        capacity=PREFETCH,
        depth=PREFETCH,
        next_to_take=1 + PREFETCH,
        next_to_claim=1 + PREFETCH,
        building=0,
        ready=0,
        stop=None,
        lent=PREFETCH,
    )
    # with workers=0 the steps handed off are read, and built on the consumer's thread
    # when taken (as ``async for`` builds them): only the batch in hand is built
    built = [0] if workers == 0 else list(range(1 + PREFETCH))
    assert sorted(collator.steps) == built
    assert dataset.reads == (1 + PREFETCH) * BATCH
    stats = loader.statistics()
    assert (stats.batches_delivered, stats.next_step) == (1, 1)  # what the consumer took
    second = next(iterator)  # one more taken: the window moves by one
    assert second[:, 0].tolist() == [5, 6, 7, 8, 9]
    wait_until_quiet(loader, 2 + PREFETCH)
    built = [0, 1] if workers == 0 else list(range(2 + PREFETCH))
    assert sorted(collator.steps) == built
    assert dataset.reads == (2 + PREFETCH) * BATCH
    stats = loader.statistics()
    assert (stats.batches_delivered, stats.next_step) == (2, 2)
    iterator.close()  # type: ignore[attr-defined]
    assert sorted(collator.steps) == built
    assert loader.statistics().batches_delivered == 2  # handed off but not taken: not counted


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(("backend", "options"), SYNC_BACKENDS)
def test_the_sync_facade_counts_a_batch_delivered_when_the_consumer_takes_it(
    backend: str, options: dict[str, Any], workers: int
) -> None:
    loader, _, collator = make_loader(workers)
    iterator = loader.iter_sync(stop=3, backend=backend, backend_options=options)
    next(iterator)
    wait_until_quiet(loader, 3)  # all three steps handed off, one taken
    stats = loader.statistics()
    built = 1 if workers == 0 else 3  # workers=0: built on the consumer's thread when taken
    assert (stats.batches_delivered, stats.batches_built, stats.next_step) == (1, built, 1)
    assert len(list(iterator)) == 2
    stats = loader.statistics()
    assert (stats.batches_delivered, stats.batches_built, stats.next_step) == (3, 3, 3)
    assert sorted(collator.steps) == [0, 1, 2]


@pytest.mark.timeout(60)
@pytest.mark.anyio
@pytest.mark.parametrize("workers", [0, 2])
async def test_the_async_stream_prepares_prefetch_steps_ahead(workers: int) -> None:
    loader, dataset, collator = make_loader(workers)
    async with loader.stream() as batches:
        iterator = batches.__aiter__()
        held = await iterator.__anext__()
        assert held[:, 0].tolist() == [0, 1, 2, 3, 4]
        with anyio.fail_after(QUIET_DEADLINE):
            while True:  # steps 1..4 prepared and waiting in the ring
                ring = loader.statistics().ring
                assert ring is not None
                if ring.building == 0 and ring.ready == PREFETCH:
                    break
                await anyio.lowlevel.checkpoint()
        for _ in range(200):  # give the loader every chance to overrun its window
            await anyio.lowlevel.checkpoint()
        assert loader.statistics().ring == RingStatistics(
            capacity=PREFETCH,
            depth=PREFETCH,
            next_to_take=1,
            next_to_claim=1 + PREFETCH,
            building=0,
            ready=PREFETCH,
            stop=None,
            lent=0,
        )
        assert dataset.reads == (1 + PREFETCH) * BATCH
        # built ahead with threads; read ahead and built when taken without them
        assert sorted(collator.steps) == list(range(1 + PREFETCH if workers else 1))
        assert loader.statistics().batches_delivered == 1


@pytest.mark.timeout(60)
def test_ring_statistics_report_the_capacity_and_the_depth() -> None:
    loader = DataLoader(
        CountingDataset(40),
        SequentialSampler(40, BATCH),
        CountingCollator(),
        seed=0,
        workers=2,
        prefetch="auto",
        autotune=AutoTune(max_workers=2, max_prefetch=16),
    )
    assert len(list(loader.iter_sync(0, 3))) == 3
    ring = loader.statistics().ring
    assert ring is not None
    assert (ring.capacity, ring.depth) == (16, 4)  # slots for the most, twice the threads in use
