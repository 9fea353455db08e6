"""aioloader.engine._blocking: ``for batch in loader`` from synchronous code."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from aioloader.core import SequentialSampler, ShuffledSampler
from aioloader.engine import DataLoader
from aioloader.testing import FailingDataset, MemoryDataset, StackCollator
from tests._support.threads import assert_threads_started_since_end

from .helpers import TrackingCollator, digests, jitter, make_samples
from .test_loader import SEED, reference_digests

SYNC_BACKENDS = [
    pytest.param("asyncio", {"use_uvloop": False}, id="asyncio"),
    pytest.param("asyncio", {"use_uvloop": True}, id="uvloop"),
    pytest.param("trio", {}, id="trio"),
]


def make_loader(workers: int, prefetch: int = 8) -> DataLoader[Any, Any]:
    return DataLoader(
        MemoryDataset(make_samples(37)),
        ShuffledSampler(37, 5, drop_last=False),
        TrackingCollator(),
        seed=SEED,
        transform=jitter,
        workers=workers,
        prefetch=prefetch,
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
    assert_threads_started_since_end(threads_before)  # the portal's loop and its workers
    assert all(b.released for b in loader.collator.built if b.global_step > 2)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("backend", "options"), SYNC_BACKENDS)
@pytest.mark.parametrize("workers", [0, 2])
def test_the_cursor_moves_as_each_batch_reaches_the_consumer(
    backend: str, options: dict[str, Any], workers: int
) -> None:
    loader = make_loader(workers, prefetch=3)
    seen: list[tuple[int, int]] = []
    for batch in loader.iter_sync(stop=20, backend=backend, backend_options=options):
        seen.append((batch.global_step, loader.next_step))  # batches behind it are handed off
    assert seen == [(g, g + 1) for g in range(20)]
    iterator = loader.iter_sync(backend=backend, backend_options=options)
    for batch in iterator:
        if batch.global_step == 23:
            break
    iterator.close()  # type: ignore[attr-defined]
    assert loader.next_step == 24  # what was handed off but not taken does not count
    assert digests([next(iter(loader.iter_sync(backend=backend, backend_options=options)))]) == (
        reference_digests(37, 5, 24, 25)
    )


@pytest.mark.parametrize(("backend", "options"), SYNC_BACKENDS)
def test_an_error_reaches_the_sync_consumer_at_its_step(
    backend: str, options: dict[str, Any]
) -> None:
    failing: FailingDataset[Any] = FailingDataset(MemoryDataset(make_samples(40)), fail_at={22})
    loader = DataLoader(
        failing, SequentialSampler(40, 4), StackCollator(), seed=0, workers=2, prefetch=4
    )
    seen: list[int] = []

    def consume() -> None:
        for batch in loader.iter_sync(backend=backend, backend_options=options):
            seen.append(batch.global_step)

    with pytest.raises(OSError, match="injected failure reading index 22"):
        consume()
    assert seen == [0, 1, 2, 3, 4]
    assert loader.next_step == 5


@pytest.mark.parametrize(("backend", "options"), SYNC_BACKENDS)
def test_breaking_out_releases_what_was_handed_off(backend: str, options: dict[str, Any]) -> None:
    threads_before = set(threading.enumerate())
    loader = make_loader(workers=2, prefetch=4)
    iterator = loader.iter_sync(0, None, backend=backend, backend_options=options)
    taken = [next(iterator) for _ in range(3)]
    iterator.close()  # type: ignore[attr-defined]
    assert_threads_started_since_end(threads_before)
    built = loader.collator.built  # type: ignore[attr-defined]
    assert [b.global_step for b in taken] == [0, 1, 2]
    assert all(b.released for b in built if b.global_step > 2)
    assert not any(b.released for b in taken)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_loaded_before_the_first_batch_is_served(workers: int) -> None:
    loader = make_loader(workers)  # 8 steps an epoch
    state = loader.state_dict()
    state["next_step"] = 13
    iterator = iter(loader)  # the epoch is the cursor's at the first next(), not now
    loader.load_state_dict(state)
    batches = list(iterator)
    assert [b.global_step for b in batches] == [13, 14, 15]  # the rest of epoch 1
    assert digests(batches) == reference_digests(37, 5, 13, 16)
    assert loader.next_step == 16


@pytest.mark.parametrize("backend", ["nope", "Trio", 3])
def test_an_unknown_backend_is_refused_by_name(backend: Any) -> None:
    loader = make_loader(workers=0)
    with pytest.raises(
        ValueError, match=rf"^backend must be 'asyncio' or 'trio' but got {backend!r}$"
    ):
        loader.iter_sync(backend=backend)
