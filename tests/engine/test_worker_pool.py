"""aioloader.engine._worker_pool: persistent worker processes across streams and epochs."""

from __future__ import annotations

import gc
import multiprocessing
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from aioloader import WorkerDiedError
from aioloader.core import SequentialSampler, ShuffledSampler, digest_batch
from aioloader.engine import DataLoader
from aioloader.testing import MemoryDataset
from tests.engine.process_helpers import (
    CountedRows,
    Crash,
    dict_collator,
    rows,
    shift,
    spawned_children,
)

pytestmark = pytest.mark.anyio

SEED = 5


@pytest.fixture(autouse=True)
def no_process_left() -> Iterator[None]:
    before = spawned_children()
    yield
    gc.collect()
    assert spawned_children() - before == set()
    assert multiprocessing.active_children() == []


def make_loader(**options: Any) -> DataLoader[Any, Any]:
    return DataLoader(
        MemoryDataset(rows(24)),
        ShuffledSampler(24, 4),
        dict_collator,
        seed=SEED,
        transform=options.pop("transform", shift),
        **options,
    )


def digest_and_release(batch: Any) -> str:
    digest = digest_batch(batch)
    release = getattr(batch, "release", None)
    if callable(release):
        release()
    return digest


async def epoch_digests(loader: DataLoader[Any, Any]) -> list[str]:
    async with loader.epoch() as batches:
        return [digest_and_release(batch) async for batch in batches]


async def range_digests(loader: DataLoader[Any, Any], start: int, stop: int) -> list[str]:
    async with loader.stream(start, stop) as batches:
        return [digest_and_release(batch) async for batch in batches]


async def test_three_epochs_give_the_threads_digests_from_the_same_processes() -> None:
    threads = make_loader(workers=2)
    expected = [await epoch_digests(threads) for _ in range(3)]
    loader = make_loader(executor="process", workers=2, prefetch=3)
    assert loader.persistent_workers
    assert loader.statistics().processes is None  # nothing starts before the first stream
    got = [await epoch_digests(loader)]
    stats = loader.statistics().processes
    assert stats is not None
    pids = stats.worker_pids
    assert len(pids) == 2
    assert all(pids)
    got.append(await epoch_digests(loader))
    got.append([digest_and_release(b) for b in loader])  # another event loop, same workers
    assert got == expected
    stats = loader.statistics().processes
    assert stats is not None
    assert stats.worker_pids == pids
    assert stats.batches_built == 18
    assert stats.workers_alive == 2
    assert spawned_children() >= set(pids)
    await loader.aclose()
    assert spawned_children() & set(pids) == set()
    assert loader.statistics().processes is None
    assert await range_digests(loader, 0, 6) == expected[0]  # usable again: new processes
    await loader.aclose()


async def test_per_stream_workers_stop_with_their_stream() -> None:
    loader = make_loader(executor="process", workers=1, persistent_workers=False)
    await epoch_digests(loader)
    assert spawned_children() == set()
    assert loader.statistics().processes is None


async def test_garbage_collecting_the_loader_stops_its_workers() -> None:
    loader = make_loader(executor="process", workers=2)
    await epoch_digests(loader)
    stats = loader.statistics().processes
    assert stats is not None
    assert set(stats.worker_pids) <= spawned_children()
    del loader, stats
    gc.collect()
    assert spawned_children() == set()


async def test_a_dead_worker_is_named_and_the_next_stream_gets_new_processes() -> None:
    loader = DataLoader(
        MemoryDataset(rows(40)),
        SequentialSampler(40, 4),
        dict_collator,
        seed=SEED,
        transform=Crash("kill", 21.0),  # in step 5
        executor="process",
        workers=2,
        prefetch=2,
    )
    with pytest.raises(WorkerDiedError) as info:
        await range_digests(loader, 0, 10)
    assert f"build worker {info.value.worker} (pid " in str(info.value)
    assert info.value.exitcode == -signal.SIGKILL
    before = loader.statistics().processes
    assert before is not None
    assert before.workers_alive == 1
    assert len(await range_digests(loader, 0, 5)) == 5
    after = loader.statistics().processes
    assert after is not None
    assert after.workers_alive == 2
    assert set(after.worker_pids).isdisjoint(before.worker_pids)
    await loader.aclose()


async def test_a_sync_dataset_is_read_in_the_workers_from_indices_alone() -> None:
    expected = await range_digests(make_loader(workers=2), 0, 12)
    dataset = CountedRows(24)
    loader = DataLoader(
        dataset,
        ShuffledSampler(24, 4),
        dict_collator,
        seed=SEED,
        transform=shift,
        executor="process",
        workers=2,
    )
    assert await range_digests(loader, 0, 12) == expected
    assert dataset.reads == 0  # every read ran on the workers' copies
    assert loader.statistics().reads_total == 48
    await loader.aclose()


async def test_a_read_error_in_a_worker_arrives_at_its_step_with_its_slot() -> None:
    loader = DataLoader(
        CountedRows(24, fail_at=9),
        SequentialSampler(24, 4),
        dict_collator,
        seed=SEED,
        executor="process",
        workers=2,
    )
    seen: list[int] = []
    with pytest.raises(KeyError, match="no row 9") as info:
        await steps_until_error(loader, seen)
    assert seen == [0, 1]
    notes = "\n".join(info.value.__notes__)  # type: ignore[attr-defined]
    assert "global step 2" in notes
    assert "slot 1" in notes
    assert "raised in build worker" in notes
    await loader.aclose()


async def steps_until_error(loader: DataLoader[Any, Any], seen: list[int]) -> None:
    async with loader.stream(0, 6) as batches:
        async for batch in batches:
            seen.append(batch["step"])


def test_bad_persistent_workers_are_rejected() -> None:
    with pytest.raises(ValueError, match="persistent_workers=True needs executor='process'"):
        make_loader(workers=2, persistent_workers=True)
    with pytest.raises(TypeError, match="persistent_workers must be True, False or None"):
        make_loader(executor="process", workers=1, persistent_workers="yes")
    assert not make_loader(workers=2).persistent_workers
