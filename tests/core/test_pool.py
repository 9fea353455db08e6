"""BufferPool: size classes, hits and misses, release rules, threads, pooled batches."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from aioloader._errors import BufferReleasedError
from aioloader.core._pool import (
    BatchField,
    BatchState,
    BufferPool,
    PooledBatch,
    PoolStatistics,
    release_batch,
    size_class,
)


def test_size_classes_are_powers_of_two_from_64_bytes() -> None:
    assert [size_class(n) for n in (0, 1, 64, 65, 128, 129, 1000, 1 << 20)] == [
        64,
        64,
        64,
        128,
        128,
        256,
        1024,
        1 << 20,
    ]


def test_acquire_gives_the_shape_and_dtype_asked() -> None:
    pool = BufferPool()
    a = pool.acquire((3, 5), np.float32)
    b = pool.acquire(7, "int64")
    assert (a.shape, a.dtype, a.flags.c_contiguous) == ((3, 5), np.float32, True)
    assert (b.shape, b.dtype) == ((7,), np.int64)
    assert pool.statistics() == PoolStatistics(
        hits=0, misses=2, bytes_held=0, buffers_held=0, buffers_out=2
    )


def test_release_then_acquire_in_the_same_class_is_a_hit() -> None:
    pool = BufferPool()
    a = pool.acquire((100,), np.float32)  # 400 bytes -> 512-byte class
    raw = a.base
    pool.release(a)
    assert pool.statistics() == PoolStatistics(0, 1, 512, 1, 0)
    b = pool.acquire((2, 30), np.float64)  # 480 bytes -> same class, other view
    assert b.base is raw
    assert (b.shape, b.dtype) == ((2, 30), np.float64)
    same = pool.acquire((100,), np.float32)  # 512-byte class is empty now: a miss
    assert same.base is not raw
    assert pool.statistics() == PoolStatistics(1, 2, 0, 0, 2)


def test_the_same_shape_reuses_the_same_array_object() -> None:
    pool = BufferPool()
    a = pool.acquire((4, 4), np.int32)
    pool.release(a)
    assert pool.acquire((4, 4), np.int32) is a


def test_other_classes_are_misses() -> None:
    pool = BufferPool()
    pool.release(pool.acquire((1000,), np.uint8))
    kept = pool.acquire((10,), np.uint8)
    assert kept.shape == (10,)
    assert pool.statistics() == PoolStatistics(0, 2, 1024, 1, 1)


@pytest.mark.parametrize(
    ("shape", "error", "message"),
    [
        ((2, -1), ValueError, "shape[1] must be >= 0 but got -1"),
        ((2.0,), TypeError, "shape[0] must be an integer but got float (2.0)"),
        ("ab", TypeError, "shape must be an int or a tuple of ints but got str ('ab')"),
    ],
)
def test_bad_shapes_are_named(shape: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        BufferPool().acquire(shape, np.float32)
    assert str(info.value) == message


def test_object_dtype_is_refused() -> None:
    with pytest.raises(TypeError, match="dtype must not hold Python objects but got object"):
        BufferPool().acquire((2,), object)


def test_release_of_a_foreign_or_released_array_is_an_error() -> None:
    pool = BufferPool()
    with pytest.raises(ValueError, match="must be one acquired from this pool"):
        pool.release(np.zeros(3))
    a = pool.acquire((3,), np.float32)
    with pytest.raises(ValueError, match="not yet released"):
        pool.release(a[:2])
    pool.release(a)
    with pytest.raises(ValueError, match="not yet released"):
        pool.release(a)
    assert pool.statistics().buffers_held == 1


def test_dropped_arrays_are_collected_and_not_counted_out() -> None:
    pool = BufferPool()
    a = pool.acquire((3,), np.float32)
    assert pool.statistics().buffers_out == 1
    del a
    gc.collect()
    assert pool.statistics().buffers_out == 0


def test_max_bytes_held_drops_extra_buffers() -> None:
    pool = BufferPool(max_bytes_held=128)
    arrays = [pool.acquire((16,), np.float32) for _ in range(3)]  # 64 bytes each
    for array in arrays:
        pool.release(array)
    assert pool.statistics() == PoolStatistics(0, 3, 128, 2, 0)
    pool.clear()
    assert pool.statistics() == PoolStatistics(0, 3, 0, 0, 0)


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="max_bytes_held must be >= 0 or None but got -1"):
        BufferPool(max_bytes_held=-1)
    with pytest.raises(ValueError, match="max_objects_per_type must be >= 0 but got -2"):
        BufferPool(max_objects_per_type=-2)


def test_objects_are_recycled_by_exact_type() -> None:
    pool = BufferPool(max_objects_per_type=1)
    first, second = BatchState(), BatchState()
    pool.recycle(first)
    pool.recycle(second)  # over the limit: dropped
    assert pool.reuse(PooledBatch) is None
    assert pool.reuse(BatchState) is first
    assert pool.reuse(BatchState) is None


def test_threads_share_a_pool_without_losing_buffers() -> None:
    pool = BufferPool()
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def work(seed: int) -> None:
        try:
            start.wait()
            for k in range(300):
                shape = (seed + 1, (k % 7) + 1)
                a = pool.acquire(shape, np.int64)
                a.fill(seed)
                b = pool.acquire((k % 13 + 1,), np.float32)
                assert (a == seed).all()
                pool.release(b)
                pool.release(a)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    stats = pool.statistics()
    assert stats.buffers_out == 0
    assert stats.hits + stats.misses == 4 * 300 * 2
    assert stats.buffers_held == stats.misses


class _State(BatchState):
    __slots__ = ("value",)

    def __init__(self) -> None:
        super().__init__()
        self.value = np.empty(0)


class _Batch(PooledBatch[_State]):
    __slots__ = ()
    value = BatchField[np.ndarray]("the value")


def _batch(pool: BufferPool) -> _Batch:
    state = pool.reuse(_State) or _State()
    state.value = pool.acquire((4,), np.float32)
    state.pool, state.buffers = pool, (state.value,)
    return _Batch(state)


def test_release_returns_buffers_recycles_state_and_blocks_reads() -> None:
    pool = BufferPool()
    batch = _batch(pool)
    state = batch._state
    batch.value[:] = 1.0
    with batch as same:
        assert same is batch
        assert batch.released is False
    assert batch.released is True
    with pytest.raises(BufferReleasedError, match="_Batch was released"):
        _ = batch.value
    batch.release()  # idempotent
    assert pool.statistics() == PoolStatistics(0, 1, 64, 1, 0)
    again = _batch(pool)
    assert again._state is state
    with pytest.raises(BufferReleasedError):
        _ = batch.value  # the old handle never shows the new batch
    assert _Batch.value.__doc__ == "the value"


def test_entering_a_released_batch_is_an_error() -> None:
    batch = _batch(BufferPool())
    batch.release()
    with pytest.raises(BufferReleasedError), batch:
        pass


def test_concurrent_release_gives_back_once() -> None:
    pool = BufferPool()
    for _ in range(50):
        batch = _batch(pool)
        threads = [threading.Thread(target=batch.release) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert pool.statistics() == PoolStatistics(49, 1, 64, 1, 0)


def test_release_batch_releases_a_pooled_batch_and_leaves_others_alone() -> None:
    pool = BufferPool()
    state = BatchState()
    state.pool, state.buffers = pool, (pool.acquire((4,), np.int64),)
    batch: PooledBatch[BatchState] = PooledBatch(state)
    assert pool.statistics().buffers_out == 1
    release_batch(batch)
    assert batch.released
    assert pool.statistics().buffers_out == 0
    plain = [1, 2]
    release_batch(plain)
    assert plain == [1, 2]
