"""aioloader.engine._loader: the stream is a pure function of (seed, step)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import anyio
import numpy as np
import pytest

from aioloader import LoaderClosedError, takes_rng
from aioloader.core import SampleRng, SequentialSampler, ShuffledSampler, digest_batch, plan_batch
from aioloader.engine import DataLoader
from aioloader.testing import FailingDataset, MemoryDataset, SlowDataset, StackCollator

from .helpers import TrackingCollator, digests, jitter, make_samples

pytestmark = pytest.mark.anyio

SEED = 1234


def reference_digests(n: int, batch: int, start: int, stop: int) -> list[str]:
    """The batches built by hand, one after another: what every configuration must match."""
    samples = make_samples(n)
    sampler = ShuffledSampler(n, batch, drop_last=False)
    collator = TrackingCollator()
    out = []
    for g in range(start, stop):
        plan = plan_batch(sampler, SEED, g)
        keys = plan.transform_keys().tolist()
        chosen = [jitter(samples[i], SampleRng(k)) for i, k in zip(plan.indices, keys, strict=True)]
        out.append(digest_batch(collator(chosen, plan)))
    return out


def make_loader(n: int = 37, batch: int = 5, **options: Any) -> DataLoader[Any, Any]:
    dataset = options.pop("dataset", MemoryDataset(make_samples(n)))
    return DataLoader(
        dataset,
        ShuffledSampler(n, batch, drop_last=False),
        TrackingCollator(),
        seed=SEED,
        transform=jitter,
        **options,
    )


async def collect(loader: DataLoader[Any, Any], start: int, stop: int) -> list[Any]:
    async with loader.stream(start, stop) as batches:
        return [batch async for batch in batches]


@pytest.mark.parametrize("workers", [0, 1, 3])
@pytest.mark.parametrize("prefetch", [1, 2, 8])
async def test_same_stream_for_any_workers_and_prefetch(workers: int, prefetch: int) -> None:
    loader = make_loader(workers=workers, prefetch=prefetch)
    batches = await collect(loader, 0, 20)  # 8 steps per epoch: crosses two epoch boundaries
    assert [b.global_step for b in batches] == list(range(20))
    assert digests(batches) == reference_digests(37, 5, 0, 20)


@pytest.mark.parametrize("start", [1, 7, 8, 13])
async def test_resumed_stream_equals_tail(start: int) -> None:
    full = digests(await collect(make_loader(workers=2), 0, 20))
    resumed = digests(await collect(make_loader(workers=1, prefetch=3), start, 20))
    assert resumed == full[start:]


async def test_scrambled_read_times_give_the_same_stream() -> None:
    slow: SlowDataset[Any] = SlowDataset(MemoryDataset(make_samples(37)), max_delay=0.003, seed=5)
    loader = make_loader(dataset=slow, workers=2, prefetch=6, max_inflight_reads=16)
    batches = await collect(loader, 0, 12)
    assert digests(batches) == reference_digests(37, 5, 0, 12)
    assert slow.peak_in_flight > 5  # reads of several steps overlapped
    assert slow.peak_in_flight <= 16


async def test_error_at_step_is_delivered_in_order() -> None:
    sampler = SequentialSampler(40, 4)
    failing: FailingDataset[Any] = FailingDataset(MemoryDataset(make_samples(40)), fail_at={22})
    loader = DataLoader(failing, sampler, StackCollator(), seed=0, workers=2, prefetch=4)
    seen: list[int] = []

    async def consume() -> None:
        async with loader.stream(0, 10) as batches:
            async for batch in batches:
                seen.append(batch.global_step)

    with pytest.raises(OSError, match="injected failure reading index 22") as info:
        await consume()
    assert seen == [0, 1, 2, 3, 4]
    assert info.value.__notes__ == [  # type: ignore[attr-defined]
        "aioloader: while building global step 5 (epoch 0, step 5), slot 2, dataset index 22"
    ]


async def test_stream_ends_after_error_without_context_manager() -> None:
    loader = DataLoader(
        FailingDataset(MemoryDataset(make_samples(40)), fail_at={9}),
        SequentialSampler(40, 4),
        StackCollator(),
        seed=0,
    )
    stream = loader.stream(0, 10)
    got = [(await stream.__anext__()).global_step for _ in range(2)]
    assert got == [0, 1]
    with pytest.raises(OSError, match="index 9"):
        await stream.__anext__()
    with pytest.raises(LoaderClosedError, match=r"failed \(OSError at global step 2\)"):
        await stream.__anext__()
    await stream.aclose()


async def test_transform_and_collator_errors_carry_notes() -> None:
    @takes_rng
    def bad_transform(sample: Any, rng: SampleRng) -> Any:
        if sample[0] == 6:
            raise ValueError("bad sample")
        return sample

    loader = DataLoader(
        MemoryDataset(make_samples(12)),
        SequentialSampler(12, 4),
        StackCollator(),
        seed=0,
        transform=bad_transform,
        workers=1,
    )
    with pytest.raises(ValueError, match="bad sample") as info:
        await collect(loader, 0, 3)
    assert info.value.__notes__ == [  # type: ignore[attr-defined]
        "aioloader: in the transform of global step 1 (epoch 0, step 1), slot 2, dataset index 6"
    ]


async def test_epoch_iteration_advances_the_cursor_and_state_resumes() -> None:
    loader = make_loader(workers=1)
    assert len(loader) == 8
    first_epoch = [b async for b in loader]
    assert [b.global_step for b in first_epoch] == list(range(8))
    state = loader.state_dict()
    assert {k: state[k] for k in ("version", "seed", "next_step")} == {
        "version": 3,
        "seed": SEED,
        "next_step": 8,
    }
    assert state["stream"] == (
        "ShuffledSampler(n=37, batch_size=5, drop_last=False) over a dataset of 37 items"
    )
    partial = []
    async for batch in loader:
        partial.append(batch)
        if batch.global_step == 10:
            break
    saved = loader.state_dict()
    assert saved["next_step"] == 11
    resumed = make_loader(workers=3)
    resumed.load_state_dict(saved)
    rest = [b async for b in resumed]
    assert [b.global_step for b in rest] == list(range(11, 16))
    assert digests(partial + rest) == reference_digests(37, 5, 8, 16)


async def test_sync_dataset_is_read_in_threads() -> None:
    loop_thread = threading.get_ident()
    readers: set[int] = set()
    samples = make_samples(20)

    class ListDataset:
        def __len__(self) -> int:
            return len(samples)

        def __getitem__(self, index: int) -> Any:
            readers.add(threading.get_ident())
            return samples[index]

    loader = DataLoader(ListDataset(), SequentialSampler(20, 4), StackCollator(), seed=0)
    batches = await collect(loader, 0, 5)
    assert [b.indices.tolist() for b in batches][1] == [4, 5, 6, 7]
    assert np.array_equal(batches[4].data, np.stack(samples[16:20]))
    assert readers
    assert loop_thread not in readers


def test_the_statistics_copy_the_counters_they_name() -> None:
    from dataclasses import fields

    from aioloader.engine._config import LoaderCounters
    from aioloader.engine._loader import COUNTED, LoaderStatistics

    reported = {field.name for field in fields(LoaderStatistics)}
    assert sorted(set(COUNTED) - (reported & set(LoaderCounters.__slots__))) == []
    assert sorted(COUNTED) == [
        "batches_built",
        "batches_delivered",
        "build_seconds",
        "consumer_wait_seconds",
        "read_seconds",
        "samples_skipped",
    ]


async def test_statistics_count_deliveries() -> None:
    loader = make_loader(workers=1, prefetch=4)
    async with loader.stream(stop=9) as batches:
        assert len([batch async for batch in batches]) == 9
    stats = loader.statistics()
    assert stats.batches_delivered == 9
    assert stats.batches_built >= 9
    assert stats.reads_in_flight == 0
    assert stats.reads_total >= 9 * 5 - 3
    assert stats.next_step == 9
    assert stats.ring is not None
    assert stats.ring.capacity == 4
    assert stats.consumer_wait_seconds >= 0.0


async def test_every_undelivered_batch_is_released_when_leaving_early() -> None:
    loader = make_loader(workers=2, prefetch=8)
    collator = loader.collator
    async with loader.stream(0, None) as batches:
        async for batch in batches:
            batch.release()
            if batch.global_step == 3:
                break
    assert all(b.released for b in collator.built)  # type: ignore[attr-defined]
    assert len(collator.built) >= 4  # type: ignore[attr-defined]


async def test_bare_async_for_cleans_up_on_break() -> None:
    loader = make_loader(workers=1, prefetch=8)
    stream = loader.stream(0, None)
    async for batch in stream:
        batch.release()
        if batch.global_step == 2:
            break
    await stream.aclose()
    assert all(b.released for b in loader.collator.built)  # type: ignore[attr-defined]


async def test_cancelling_the_consumer_leaves_nothing_running() -> None:
    threads_before = threading.active_count()
    slow: SlowDataset[Any] = SlowDataset(MemoryDataset(make_samples(37)), max_delay=0.01)
    loader = make_loader(dataset=slow, workers=2, prefetch=8)
    with anyio.move_on_after(0.05):
        async with loader.stream(0, None) as batches:
            async for batch in batches:
                batch.release()
    assert slow.in_flight == 0
    assert loader.statistics().reads_in_flight == 0
    assert all(b.released for b in loader.collator.built)  # type: ignore[attr-defined]
    assert threading.active_count() <= threads_before + 2  # anyio's idle pool threads at most


def test_constructor_rejects_bad_arguments() -> None:
    dataset = MemoryDataset(make_samples(4))
    sampler = SequentialSampler(4, 2)
    with pytest.raises(ValueError, match=r"^prefetch must be an integer in \[1, 65536\] but"):
        DataLoader(dataset, sampler, StackCollator(), seed=0, prefetch=0)
    with pytest.raises(ValueError, match=r"^workers must be an integer >= 0 but got -1$"):
        DataLoader(dataset, sampler, StackCollator(), seed=0, workers=-1)
    with pytest.raises(ValueError, match=r"^seed must be an integer in \[0, 2\^64\) but got -2$"):
        DataLoader(dataset, sampler, StackCollator(), seed=-2)
    with pytest.raises(ValueError, match="fewer items than one batch"):
        DataLoader(dataset, SequentialSampler(1, 2), StackCollator(), seed=0)
    with pytest.raises(TypeError, match=r"^dataset must have async get_sample"):
        DataLoader(object(), sampler, StackCollator(), seed=0)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"^collator must be callable but got int$"):
        DataLoader(dataset, sampler, 3, seed=0)  # type: ignore[call-overload]
    loader = DataLoader(dataset, sampler, StackCollator(), seed=0)
    with pytest.raises(ValueError, match=r"^state\['seed'\] must equal the loader's seed 0"):
        loader.load_state_dict({"seed": 1, "next_step": 3})
    with pytest.raises(ValueError, match=r"^stop must be >= start \(3\) but got 1$"):
        loader.stream(3, 1)


def test_a_for_loop_after_break_warns_that_it_resumes_the_epoch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loader = make_loader(n=20, batch=5)  # 4 steps per epoch
    with caplog.at_level(logging.WARNING, logger="aioloader.resume"):
        for _ in loader:
            break
        assert [r.getMessage() for r in caplog.records] == []
        assert [batch.global_step for batch in loader] == [1, 2, 3]
        assert [batch.global_step for batch in loader] == [4, 5, 6, 7]  # a whole epoch
    (record,) = caplog.records
    assert record.name == "aioloader.resume"
    assert record.getMessage().startswith(
        "aioloader: this for loop resumes epoch 0 at global step 1 (3 of 4 steps left)"
    )


def test_the_resume_warning_is_silenced_by_its_logger_and_not_given_after_a_load(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loader = make_loader(n=20, batch=5)
    with caplog.at_level(logging.WARNING, logger="aioloader.resume"):
        for _ in loader:
            break
        loader.load_state_dict(loader.state_dict())  # an explicit resume: no warning
        assert [batch.global_step for batch in loader] == [1, 2, 3]
    assert caplog.records == []
    silenced = make_loader(n=20, batch=5)
    resume = logging.getLogger("aioloader.resume")
    with caplog.at_level(logging.WARNING):
        resume.setLevel(logging.ERROR)
        try:
            for _ in silenced:
                break
            assert [batch.global_step for batch in silenced] == [1, 2, 3]
        finally:
            resume.setLevel(logging.NOTSET)
    assert caplog.records == []
