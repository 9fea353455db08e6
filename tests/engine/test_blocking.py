"""aioloader.engine._blocking: ``for batch in loader`` from synchronous code."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from aioloader.core import ShuffledSampler
from aioloader.engine import DataLoader
from aioloader.testing import MemoryDataset

from .helpers import TrackingCollator, digests, jitter, make_samples
from .test_loader import SEED, reference_digests


def make_loader(workers: int) -> DataLoader[Any, Any]:
    return DataLoader(
        MemoryDataset(make_samples(37)),
        ShuffledSampler(37, 5, drop_last=False),
        TrackingCollator(),
        seed=SEED,
        transform=jitter,
        workers=workers,
    )


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_sync_iteration_gives_the_same_batches(backend: str) -> None:
    loader = make_loader(workers=2)
    batches = list(loader.iter_sync(0, 12, backend=backend))
    assert digests(batches) == reference_digests(37, 5, 0, 12)
    assert loader.next_step == 0  # an explicit range leaves the resume cursor alone
    batches = list(loader.iter_sync(stop=12, backend=backend))
    assert digests(batches) == reference_digests(37, 5, 0, 12)
    assert loader.next_step == 12  # start=None: cursor-driven


def test_for_loop_yields_one_epoch_and_advances() -> None:
    loader = make_loader(workers=0)
    first = list(loader)
    second = list(loader)
    assert [b.global_step for b in first] == list(range(8))
    assert [b.global_step for b in second] == list(range(8, 16))
    assert digests(first + second) == reference_digests(37, 5, 0, 16)


def test_breaking_out_closes_the_portal_thread() -> None:
    threads_before = set(threading.enumerate())
    loader = make_loader(workers=1)
    for _ in range(5):
        iterator = loader.iter_sync(0, None)
        for batch in iterator:
            if batch.global_step == 2:
                break
        iterator.close()  # type: ignore[attr-defined]  # what the GC does for a dropped generator
    for thread in set(threading.enumerate()) - threads_before:
        thread.join(timeout=30)  # the portal's loop and its worker threads all end
        assert not thread.is_alive(), thread
    assert all(b.released for b in loader.collator.built if b.global_step > 2)  # type: ignore[attr-defined]
