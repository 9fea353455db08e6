"""Backpressure: a consumer that stops never makes the loader hold more than ``prefetch``
batches ahead or more than ``max_inflight_reads`` reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from aioloader import takes_plan
from aioloader.core import BatchPlan, ShuffledSampler
from aioloader.engine import DataLoader
from aioloader.testing import MemoryDataset, SlowDataset

pytestmark = pytest.mark.anyio

BATCH, PREFETCH, MAX_READS = 6, 3, 5


class Held:
    """A batch that records its release."""

    def __init__(self, global_step: int) -> None:
        self.global_step = global_step
        self.released = False

    def release(self) -> None:
        self.released = True


@takes_plan
class LiveCounter:
    """A collator that counts the batches built and not yet released."""

    def __init__(self) -> None:
        self.built: list[Held] = []

    def live(self) -> int:
        return sum(not batch.released for batch in self.built)

    def __call__(self, samples: Sequence[Any], plan: BatchPlan) -> Held:
        batch = Held(plan.global_step)
        self.built.append(batch)
        return batch


@pytest.mark.parametrize("workers", [0, 2])
async def test_a_paused_consumer_bounds_batches_and_reads(workers: int) -> None:
    dataset: SlowDataset[int] = SlowDataset(
        MemoryDataset(list(range(120))), max_delay=0.002, seed=3
    )
    collator = LiveCounter()
    loader = DataLoader(
        dataset,
        ShuffledSampler(120, BATCH),
        collator,
        seed=1,
        workers=workers,
        prefetch=PREFETCH,
        max_inflight_reads=MAX_READS,
    )
    async with loader.stream(0, None) as batches:
        iterator = batches.__aiter__()
        held = await iterator.__anext__()  # the consumer takes step 0 and stops
        with anyio.fail_after(30):
            while True:  # until steps 1..PREFETCH are all prepared (checkpoints, no timing)
                ring = loader.statistics().ring
                assert ring is not None
                if ring.ready == PREFETCH and ring.building == 0:
                    break
                await anyio.lowlevel.checkpoint()
        for _ in range(200):  # give the loader every chance to overrun its window
            await anyio.lowlevel.checkpoint()
        ring = loader.statistics().ring
        assert ring is not None
        assert (ring.next_to_take, ring.next_to_claim, ring.ready) == (1, 1 + PREFETCH, PREFETCH)
        assert dataset.reads == (1 + PREFETCH) * BATCH  # nothing read past the window
        assert 1 < dataset.peak_in_flight <= MAX_READS
        assert loader.statistics().peak_reads_in_flight <= MAX_READS
        # batches alive: the one held plus, with workers, the PREFETCH built ahead
        assert collator.live() == (1 + PREFETCH if workers else 1)
        held.release()
        resumed = await iterator.__anext__()
        assert resumed.global_step == 1
        resumed.release()
    assert collator.live() == 0
