"""aioloader.interop.DeviceStream on FakeDevice: the rules of the device feed, exactly.

The fake defers every copy until its event completes (its device arrays hold POISON
bytes until then) and lists every breach of the rules in ``violations``.
"""

from __future__ import annotations

import gc
import mmap
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import anyio.to_thread
import numpy as np
import numpy.typing as npt
import pytest

from aioloader.core import BufferPool, digest_batch
from aioloader.interop import DeviceStatistics, DeviceStream, FakeDevice
from aioloader.interop._fake_device import POISON
from tests.interop.helpers import expected_tokens, host_fields, pad_loader, pooled_batches

FIELDS = 4  # a PaddedBatch's arrays: tokens, lengths, attention_mask, indices


async def _async(batches: Iterator[Any]) -> AsyncIterator[Any]:
    for batch in batches:
        yield batch


def _tokens(g: int) -> npt.NDArray[np.float32]:
    return expected_tokens(g)  # type: ignore[no-any-return]


# -- handing over -------------------------------------------------------------------------


def test_a_batch_is_handed_over_only_once_its_copy_completed() -> None:
    fake, pool = FakeDevice(), BufferPool()
    stream = DeviceStream(pooled_batches(pool, 6), fake, depth=3)
    batches = iter(stream)
    first = next(batches)
    # three batches staged and enqueued; the consumer waited for the first one only
    assert fake.copies_enqueued == 3 * FIELDS
    assert fake.copies_completed == FIELDS
    assert (fake.waits, fake.pending_events, fake.handed_over) == (1, 2, 1)
    assert np.array_equal(first["tokens"], _tokens(0))
    assert first["global_step"] == 0
    assert fake.complete(1) == 1  # the device finishes the second copy on its own
    second = next(batches)
    assert fake.waits == 1  # no wait: the copy had completed
    assert np.array_equal(second["tokens"], _tokens(1))
    rest = list(batches)
    assert [b["global_step"] for b in rest] == [2, 3, 4, 5]
    assert all(np.array_equal(b["tokens"], _tokens(b["global_step"])) for b in rest)
    assert fake.handed_over == 6
    assert fake.violations == []


def test_the_fake_device_reports_a_batch_handed_over_early() -> None:
    fake = FakeDevice()
    staging = fake.alloc_staging((2,), np.dtype(np.int32))
    fake.fill(staging, np.array([1, 2], np.int32))
    target = fake.copy_async(staging)
    event = fake.record()
    assert target.view(np.uint8).tolist() == [POISON] * 8  # not copied yet
    with pytest.raises(AssertionError, match="handed over before its copy completed"):
        fake.hand_over([target], event)
    with pytest.raises(AssertionError, match="written while 1 copy"):
        fake.fill(staging, np.array([3, 4], np.int32))
    fake.wait(event)
    assert target.tolist() == [1, 2]
    assert len(fake.violations) == 2


# -- staging -------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_staging_is_reused_only_after_its_copy_completed_and_stays_bounded(depth: int) -> None:
    fake, pool = FakeDevice(), BufferPool()
    stream = DeviceStream(pooled_batches(pool, 103), fake, depth=depth)
    allocations: list[int] = []
    for batch in stream:
        assert np.array_equal(batch["tokens"], _tokens(batch["global_step"]))
        allocations.append(fake.pinned_allocations)
    # warm-up allocates one set per batch in flight; nothing more in 100 later batches
    assert allocations[2:] == [depth * FIELDS] * 101
    assert fake.violations == []
    stats = stream.statistics()
    assert stats == DeviceStatistics(
        batches=103,
        host_waits=103,
        copies=103 * FIELDS,
        direct_copies=0,
        staging_allocations=depth * FIELDS,
        staging_reuses=(103 - depth) * FIELDS,
        staging_held=depth * FIELDS,
        registrations=0,
        in_flight=0,
    )


def test_staging_follows_shapes_and_drops_the_least_recently_used() -> None:
    fake = FakeDevice()
    shapes = [(2,), (3,), (2,), (4,), (5,), (6,), (2,)]
    batches = [{"x": np.full(shape, k, np.int16)} for k, shape in enumerate(shapes)]
    out = list(DeviceStream(batches, fake, depth=1))
    assert [b["x"].tolist() for b in out] == [b["x"].tolist() for b in batches]
    # depth 1, one field: the pool keeps 2 buffers at most; (2,) came back after 1 other
    assert fake.pinned_allocations == 6
    assert fake.violations == []


def test_a_kept_device_array_is_never_overwritten_by_100_later_batches() -> None:
    fake, pool = FakeDevice(), BufferPool()
    batches = iter(DeviceStream(pooled_batches(pool, 101), fake, depth=2))
    kept = next(batches)
    kept_bytes = {name: np.array(value, copy=True) for name, value in kept.items()}
    for batch in batches:
        assert not np.shares_memory(batch["tokens"], kept["tokens"])
    for name, value in kept_bytes.items():
        assert np.array_equal(kept[name], value), name
    assert np.array_equal(kept["tokens"], _tokens(0))
    assert pool.statistics().misses == 3  # the host buffers served all 101 batches
    assert fake.violations == []


def test_the_host_batch_is_released_as_soon_as_its_bytes_are_staged() -> None:
    fake, pool = FakeDevice(), BufferPool()
    batches = iter(DeviceStream(pooled_batches(pool, 5), fake, depth=3))
    next(batches)
    # three batches submitted, none of their copies needed: all host buffers are back
    assert fake.copies_completed == FIELDS
    assert pool.statistics().buffers_out == 0
    assert pool.statistics().buffers_held == 3
    batches.close()  # type: ignore[attr-defined]


# -- shared memory read in place ----------------------------------------------------------


class _MappedBatch:
    """A batch whose arrays are views of an mmap; records when it is released."""

    def __init__(self, mapping: mmap.mmap, g: int, fake: FakeDevice, log: list[Any]) -> None:
        whole = np.frombuffer(mapping, np.float32)
        self.data = whole[g * 8 : g * 8 + 8]
        self.data[:] = np.arange(8, dtype=np.float32) + 10 * g
        self.g, self._fake, self._log = g, fake, log

    def __batch_fields__(self) -> list[tuple[str, Any]]:
        return [("data", self.data), ("g", self.g)]

    def release(self) -> None:
        self._log.append((self.g, self._fake.copies_completed))


def test_mapped_memory_is_registered_once_copied_in_place_and_unregistered_at_close() -> None:
    fake = FakeDevice(can_register=True)
    mapping = mmap.mmap(-1, 4096)
    log: list[Any] = []
    source = [_MappedBatch(mapping, g, fake, log) for g in range(6)]
    with DeviceStream(source, fake, depth=2) as stream:
        out = list(stream)
        assert [b["data"].tolist() for b in out] == [
            (np.arange(8) + 10 * g).tolist() for g in range(6)
        ]
        assert fake.registrations == 1
        assert list(fake.registered.values()) == [4096]
        # a batch read in place is released only after its copy completed (copy g+1)
        assert log == [(g, g + 1) for g in range(6)]
        stats = stream.statistics()
        assert (stats.direct_copies, stats.copies, stats.staging_allocations) == (6, 6, 0)
        assert stats.registrations == 1
        assert fake.pinned_allocations == 0
    assert fake.registered == {}
    assert stream.statistics().registrations == 0
    assert fake.violations == []


def test_mapped_memory_that_cannot_be_registered_is_staged() -> None:
    fake = FakeDevice(can_register=False)
    mapping = mmap.mmap(-1, 4096)
    log: list[Any] = []
    out = list(DeviceStream([_MappedBatch(mapping, g, fake, log) for g in range(3)], fake))
    assert [b["data"][0] for b in out] == [0, 10, 20]
    assert (fake.registrations, fake.pinned_allocations) == (0, 2)
    assert fake.violations == []


def test_process_workers_batches_are_copied_from_shared_memory_in_place() -> None:
    loader = pad_loader(executor="process", workers=2, prefetch=4)
    reference = [digest_batch(host_fields(b)) for b in _released(loader.iter_sync(0, 12))]
    fake = FakeDevice(can_register=True)
    with DeviceStream(loader.iter_sync(0, 12), fake, depth=2) as stream:
        digests = [digest_batch(batch) for batch in stream]
        stats = stream.statistics()
        assert stats.direct_copies == stats.copies == 12 * FIELDS
        assert stats.staging_allocations == 0
        assert 1 <= stats.registrations <= 8  # one per segment mapping, not per batch
    assert digests == reference
    assert fake.registered == {}
    assert fake.violations == []


def _released(batches: Iterator[Any]) -> Iterator[Any]:
    for batch in batches:
        with batch:
            yield batch


# -- ends: exhaustion, break, errors, closing ---------------------------------------------


def test_break_releases_what_is_in_flight_and_closes_the_source() -> None:
    fake, pool = FakeDevice(), BufferPool()
    closed: list[bool] = []

    def source() -> Iterator[Any]:
        try:
            yield from pooled_batches(pool, 50)
        finally:
            closed.append(True)

    stream = DeviceStream(source(), fake, depth=3)
    for batch in stream:
        if batch["global_step"] == 4:
            break
    assert closed == [True]
    assert fake.pending_events == 0
    assert stream.statistics().in_flight == 0
    assert pool.statistics().buffers_out == 0
    assert fake.violations == []


def test_an_error_from_the_source_ends_the_stream_after_the_batches_before_it() -> None:
    fake, pool = FakeDevice(), BufferPool()

    def source() -> Iterator[Any]:
        yield from pooled_batches(pool, 3)
        raise OSError("disk gone")

    seen = []

    def consume() -> None:
        for batch in DeviceStream(source(), fake, depth=2):
            seen.append(batch["global_step"])

    with pytest.raises(OSError, match="disk gone"):
        consume()
    assert seen == [0, 1]  # batch 2 was in flight when the error came
    assert fake.pending_events == 0
    assert pool.statistics().buffers_out == 0


def test_a_leaf_that_cannot_be_staged_releases_the_batch_and_waits_for_its_copies() -> None:
    fake, pool = FakeDevice(), BufferPool()
    bad = next(pooled_batches(pool, 1))

    class Broken:
        def __batch_fields__(self) -> list[tuple[str, Any]]:
            return [*bad.__batch_fields__(), ("oops", ValueError)]

        def release(self) -> None:
            bad.release()

    def explode(value: Any) -> Any:
        if value is ValueError:
            raise TypeError("cannot move ValueError")
        return None

    fake.convert_other = explode  # type: ignore[method-assign]
    with pytest.raises(TypeError, match="cannot move"):
        list(DeviceStream([Broken()], fake))
    assert bad.released
    assert fake.pending_events == 0
    assert fake.copies_completed == fake.copies_enqueued == FIELDS


def test_close_waits_unregisters_and_refuses_a_new_iteration() -> None:
    fake = FakeDevice(can_register=True)
    mapping = mmap.mmap(-1, 4096)
    stream = DeviceStream([_MappedBatch(mapping, g, fake, []) for g in range(3)], fake)
    batches = iter(stream)
    next(batches)
    stream.close()
    stream.close()  # idempotent
    assert fake.pending_events == 0
    assert fake.registered == {}
    with pytest.raises(RuntimeError, match="this DeviceStream is closed"):
        iter(stream)
    assert repr(stream) == "DeviceStream('fake', depth=2)"


def test_garbage_collection_closes_the_stream() -> None:
    fake = FakeDevice(can_register=True)
    mapping = mmap.mmap(-1, 4096)
    stream = DeviceStream([_MappedBatch(mapping, g, fake, []) for g in range(3)], fake)
    assert next(iter(stream))["g"] == 0
    del stream
    gc.collect()
    assert fake.registered == {}
    assert fake.pending_events == 0


def test_bad_arguments_are_named() -> None:
    fake = FakeDevice()
    with pytest.raises(ValueError, match=r"^depth must be an integer >= 1 but got 0$"):
        DeviceStream([], fake, depth=0)
    with pytest.raises(TypeError, match=r"^batches must be an iterable or an async iterable"):
        DeviceStream(3, fake)
    with pytest.raises(TypeError, match=r"batches must be an iterable for `for` but got"):
        iter(DeviceStream(_async(iter([])), fake))
    with pytest.raises(TypeError, match=r"batches must be an async iterable for `async for`"):
        DeviceStream([], fake).__aiter__()


def test_one_iteration_at_a_time() -> None:
    stream = DeviceStream([{"x": np.zeros(2)}] * 4, FakeDevice())
    first = iter(stream)
    next(first)
    with pytest.raises(RuntimeError, match="serves one iteration at a time but `for`"):
        iter(stream)
    first.close()  # type: ignore[attr-defined]
    assert [b["x"].tolist() for b in stream] == [[0.0, 0.0]] * 4  # a new pass: allowed


# -- async for (asyncio, uvloop, trio) -----------------------------------------------------


@pytest.mark.anyio
async def test_async_for_hands_over_copied_batches_and_keeps_them_valid() -> None:
    fake, pool = FakeDevice(), BufferPool()
    stream = DeviceStream(_async(pooled_batches(pool, 101)), fake, depth=2)
    kept: dict[str, Any] | None = None
    steps = []
    allocations = []
    async for batch in stream:
        steps.append(batch["global_step"])
        assert np.array_equal(batch["tokens"], _tokens(batch["global_step"]))
        kept = kept or batch
        allocations.append(fake.pinned_allocations)
    assert steps == list(range(101))
    assert kept is not None
    assert np.array_equal(kept["tokens"], _tokens(0))
    assert allocations[1:] == [2 * FIELDS] * 100
    assert fake.handed_over == 101
    assert pool.statistics().buffers_out == 0
    assert fake.violations == []


@pytest.mark.anyio
async def test_async_for_over_a_loader_gives_its_batches() -> None:
    loader = pad_loader()
    reference = [digest_batch(host_fields(b)) for b in _released(loader.iter_sync(0, 8))]
    fake = FakeDevice()
    digests = [digest_batch(b) async for b in DeviceStream(loader.stream(0, 8), fake)]
    assert digests == reference
    assert fake.violations == []


@pytest.mark.anyio
async def test_async_break_and_error_leave_nothing_in_flight() -> None:
    fake, pool = FakeDevice(), BufferPool()
    stream = DeviceStream(_async(pooled_batches(pool, 20)), fake, depth=3)
    async for batch in stream:
        if batch["global_step"] == 2:
            break
    # an abandoned `async for`: the next one drains it and starts over
    async with stream:
        again = [b["global_step"] async for b in stream]
    assert again == list(range(5, 20))  # the first pass took 0..4 from the source
    assert fake.pending_events == 0
    assert pool.statistics().buffers_out == 0

    async def failing() -> AsyncIterator[Any]:
        for batch in pooled_batches(pool, 2):
            yield batch
        raise OSError("stream broke")

    with pytest.raises(OSError, match="stream broke"):
        async for _ in DeviceStream(failing(), fake):
            pass
    assert fake.pending_events == 0
    assert pool.statistics().buffers_out == 0
    assert fake.violations == []


class _SlowDevice(FakeDevice):
    """A fake whose copies complete only when the test says so, from the event loop."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.waiting = threading.Event()
        self.go = threading.Event()

    def wait(self, event: Any) -> None:
        self.waiting.set()
        assert self.go.wait(timeout=30), "the test never let the copy complete"
        super().wait(event)


@pytest.mark.anyio
async def test_async_consumer_waits_for_the_device_off_the_event_loop() -> None:
    fake = _SlowDevice()
    stream = DeviceStream(_async(iter([{"x": np.arange(3)}])), fake, depth=1)

    async def device() -> None:
        # runs on the loop while the consumer waits: the wait must not hold the loop
        await anyio.to_thread.run_sync(fake.waiting.wait)
        fake.go.set()

    async with anyio.create_task_group() as group:
        group.start_soon(device)
        out = [b["x"].tolist() async for b in stream]
    assert out == [[0, 1, 2]]
    assert fake.waits == 1
