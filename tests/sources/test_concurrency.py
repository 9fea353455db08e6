"""The sources' asyncio fast paths, which need only asyncio: run under pytest-asyncio."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from aioloader.sources._concurrency import (
    PerLoop,
    gather_ordered,
    running_asyncio_loop,
)


@pytest.mark.asyncio
async def test_the_running_loop() -> None:
    assert running_asyncio_loop() is asyncio.get_running_loop()


def test_no_loop_outside_async_code() -> None:
    assert running_asyncio_loop() is None


@pytest.mark.asyncio
async def test_gather_keeps_the_order_of_the_items() -> None:
    finished: list[int] = []

    async def work(delay_steps: int) -> int:
        for _ in range(delay_steps):
            await asyncio.sleep(0)
        finished.append(delay_steps)
        return delay_steps * 10

    assert await gather_ordered(work, [3, 0, 2, 1]) == [30, 0, 20, 10]
    assert finished == [0, 1, 2, 3]  # completion order differs from the result order


@pytest.mark.asyncio
async def test_gather_raises_the_lowest_failure_not_the_first() -> None:
    cancelled: list[int] = []
    finished: list[int] = []

    async def work(position: int) -> int:
        try:
            for _ in range({0: 2, 1: 3, 3: 0}.get(position, 1000)):
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            cancelled.append(position)
            raise
        if position in (1, 3):  # 3 fails first in time, 1 three ticks later
            raise ValueError(f"failed at {position}")
        finished.append(position)
        return position

    with pytest.raises(ValueError, match=r"^failed at 1$"):
        await gather_ordered(work, [0, 1, 2, 3, 4])
    assert finished == [0]  # calls before the failure run to the end
    assert cancelled == [2]  # calls after it are cancelled (4 before it even started)


@pytest.mark.asyncio
async def test_gather_cancelled_from_outside_cancels_every_call() -> None:
    started = asyncio.Event()
    cancelled: list[int] = []

    async def work(position: int) -> int:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(position)
            raise
        return position

    task = asyncio.ensure_future(gather_ordered(work, [0, 1, 2]))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(cancelled) == [0, 1, 2]


@pytest.mark.asyncio
async def test_per_loop_value_is_built_once_per_loop() -> None:
    built: list[int] = []

    def factory() -> anyio.CapacityLimiter:
        built.append(1)
        return anyio.CapacityLimiter(2)

    per_loop = PerLoop(factory)
    assert per_loop.get() is per_loop.get()
    assert len(built) == 1

    def other_loop() -> anyio.CapacityLimiter:
        async def get() -> anyio.CapacityLimiter:
            return per_loop.get()

        return asyncio.run(get())

    assert await asyncio.to_thread(other_loop) is not per_loop.get()
    assert len(built) == 3  # the other loop's, then this loop's again


def test_shared_limit_bounds_every_thread_and_loop_together() -> None:
    import threading

    import anyio
    import anyio.lowlevel

    from aioloader.sources._concurrency import SharedLimit

    limit = SharedLimit(2)
    barrier = threading.Barrier(4, timeout=30)
    held: list[int] = []
    lock = threading.Lock()

    async def use(backend_name: str) -> None:
        async def one() -> None:
            async with limit:
                with lock:
                    held.append(limit.in_use)
                for _ in range(3):  # hold the unit while this loop's other tasks ask
                    await anyio.lowlevel.checkpoint()

        barrier.wait()  # all four loops ask at once
        async with anyio.create_task_group() as group:
            for _ in range(8):
                group.start_soon(one)

    threads = [
        threading.Thread(target=anyio.run, args=(use, name), kwargs={"backend": name})
        for name in ("asyncio", "trio", "asyncio", "trio")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(held) == 32
    assert max(held) <= 2
    assert limit.peak == 2
    assert limit.in_use == 0
