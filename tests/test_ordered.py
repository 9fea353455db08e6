"""The ordered map with bounded concurrency, its outcome and its counting bound."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import pytest

from aioloader._ordered import Bound, OrderedMap, Outcome

pytestmark = pytest.mark.anyio


async def _numbers(count: int, fail_at: int | None = None) -> AsyncIterator[int]:
    for number in range(count):
        if number == fail_at:
            raise LookupError(f"upstream failed at {number}")
        yield number


async def _consume(
    mapper: OrderedMap[int, int], upstream: AsyncIterator[int], got: list[int]
) -> None:
    async with mapper.open(upstream) as results:
        async for value in results:
            got.append(value)


async def test_results_come_in_input_order_whatever_order_the_calls_finish_in() -> None:
    finished: list[int] = []
    gates = [anyio.Event() for _ in range(3)]

    async def work(number: int) -> int:
        if number % 4 == 0:  # the first of every four waits for the last of them
            await gates[number // 4].wait()
        finished.append(number)
        if number % 4 == 3:
            gates[number // 4].set()
        return number * 10

    mapper = OrderedMap(work, 4)
    async with mapper.open(_numbers(12)) as results:
        got = [value async for value in results]
    assert got == [number * 10 for number in range(12)]
    assert finished != sorted(finished)  # they did finish out of order
    assert mapper.workers <= 5


async def test_at_most_limit_inputs_between_upstream_and_the_consumer() -> None:
    running = 0
    most = 0

    async def work(number: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
        running -= 1
        return number

    async with OrderedMap(work, 3).open(_numbers(30)) as results:
        got = [value async for value in results]
    assert got == list(range(30))
    assert most == 3


async def test_a_call_error_is_raised_as_itself_at_its_position() -> None:
    async def work(number: int) -> int:
        if number == 5:
            raise KeyError(number)
        if number < 5:  # the earlier ones finish after the failure
            for _ in range(5):
                await anyio.lowlevel.checkpoint()
        return number

    got: list[int] = []
    with pytest.raises(KeyError) as caught:
        await _consume(OrderedMap(work, 8), _numbers(20), got)
    assert caught.value.args == (5,)
    assert got == [0, 1, 2, 3, 4]


async def test_an_upstream_error_is_raised_as_itself_at_its_position() -> None:
    async def work(number: int) -> int:
        return number

    got: list[int] = []
    with pytest.raises(LookupError, match="upstream failed at 7"):
        await _consume(OrderedMap(work, 3), _numbers(20, fail_at=7), got)
    assert got == list(range(7))


async def test_no_input_starts_after_a_call_failed() -> None:
    started: list[int] = []
    failed = anyio.Event()

    async def work(number: int) -> int:
        started.append(number)
        if number == 2:
            failed.set()
            raise KeyError(number)
        if number < 2:  # handed on after the failure: the window has room again
            await failed.wait()
            return number
        await anyio.sleep_forever()
        return number  # pragma: no cover

    got: list[int] = []
    with pytest.raises(KeyError):
        await _consume(OrderedMap(work, 4), _numbers(100), got)
    assert got == [0, 1]
    assert sorted(started)[:3] == [0, 1, 2]
    assert max(started) <= 3  # none after the window that was open when 2 failed


async def test_leaving_early_leaves_no_task_running_and_closes_upstream() -> None:
    """Break out with calls in flight and calls waiting: every task the map started has
    ended when the block is left (counted), and upstream is closed."""
    in_call = 0
    closed = anyio.Event()
    four_waiting = anyio.Event()

    async def numbers() -> AsyncIterator[int]:
        try:
            for number in range(1000):
                yield number
        finally:
            closed.set()

    async def work(number: int) -> int:
        nonlocal in_call
        in_call += 1
        try:
            if number > 0:
                if in_call == 5:
                    four_waiting.set()
                await anyio.sleep_forever()
            return number
        finally:
            in_call -= 1

    before = len(anyio.get_running_tasks())
    mapper = OrderedMap(work, 5)
    async with mapper.open(numbers()) as results:
        assert await results.__anext__() == 0
        await four_waiting.wait()
        assert len(anyio.get_running_tasks()) > before
    assert in_call == 0
    assert len(anyio.get_running_tasks()) == before
    assert closed.is_set()


async def test_cancelling_the_consumer_leaves_no_task_running() -> None:
    calls = 0

    async def work(number: int) -> int:
        nonlocal calls
        calls += 1
        await anyio.sleep_forever()
        return number  # pragma: no cover

    before = len(anyio.get_running_tasks())
    with anyio.CancelScope() as scope:
        async with OrderedMap(work, 6).open(_numbers(50)) as results:
            while calls < 6:
                await anyio.lowlevel.checkpoint()
            scope.cancel()
            await results.__anext__()
    assert scope.cancelled_caught
    assert len(anyio.get_running_tasks()) == before


async def test_a_map_may_be_opened_again() -> None:
    async def work(number: int) -> int:
        return -number

    mapper = OrderedMap(work, 2)
    for _ in range(2):
        async with mapper.open(_numbers(5)) as results:
            assert [value async for value in results] == [0, -1, -2, -3, -4]


def test_an_outcome_is_a_value_or_an_error() -> None:
    error = KeyError(1)
    assert (Outcome(3).value, Outcome(3).error) == (3, None)
    assert (Outcome(None, error).value, Outcome(None, error).error) == (None, error)


async def test_a_bound_takes_free_units_at_once_and_queues_the_rest() -> None:
    bound = Bound(2)
    assert bound.try_acquire()
    assert bound.try_acquire()
    assert not bound.try_acquire()
    order: list[str] = []

    async def wait(name: str, count: int) -> None:
        await bound.acquire(count)
        order.append(name)

    async with anyio.create_task_group() as group:
        group.start_soon(wait, "a", 2)
        while len(bound._waiters) < 1:
            await anyio.lowlevel.checkpoint()
        group.start_soon(wait, "b", 1)
        while len(bound._waiters) < 2:
            await anyio.lowlevel.checkpoint()
        bound.release()
        await anyio.lowlevel.checkpoint()
        assert order == []  # a needs two: b waits behind it
        bound.release()
        while len(order) < 1:
            await anyio.lowlevel.checkpoint()
        assert order == ["a"]
        bound.release(2)
    assert order == ["a", "b"]
    assert (bound.in_flight, bound.peak, bound.total) == (1, 2, 5)


async def test_a_request_over_the_limit_passes_alone() -> None:
    bound = Bound(4)
    assert bound.try_acquire(10)
    assert not bound.try_acquire(1)
    bound.release(10)
    assert bound.try_acquire(1)
    assert not bound.try_acquire(10)


async def test_raising_the_limit_lets_waiters_in_and_unacquire_uncounts() -> None:
    bound = Bound(1)
    await bound.acquire()
    got = anyio.Event()

    async def wait() -> None:
        await bound.acquire()
        got.set()

    async with anyio.create_task_group() as group:
        group.start_soon(wait)
        while not bound._waiters:
            await anyio.lowlevel.checkpoint()
        bound.raise_limit(2)
        await got.wait()
    assert (bound.limit, bound.in_flight, bound.total) == (2, 2, 2)
    bound.unacquire()
    assert (bound.in_flight, bound.total) == (1, 1)


async def test_a_waiter_cancelled_after_its_grant_passes_the_unit_on() -> None:
    bound = Bound(1)
    await bound.acquire()
    second = anyio.Event()

    async def first_waiter(scope: anyio.CancelScope) -> None:
        with scope:
            await bound.acquire()
            bound.release()  # the grant won over the cancellation (asyncio may say so)

    async def second_waiter() -> None:
        await bound.acquire()
        second.set()

    scope = anyio.CancelScope()
    async with anyio.create_task_group() as group:
        group.start_soon(first_waiter, scope)
        while len(bound._waiters) < 1:
            await anyio.lowlevel.checkpoint()
        group.start_soon(second_waiter)
        while len(bound._waiters) < 2:
            await anyio.lowlevel.checkpoint()
        bound.release()  # granted to the first ...
        scope.cancel()  # ... which is cancelled before it runs
        await second.wait()
    assert bound.in_flight == 1


def test_a_shared_bound_bounds_every_thread_and_loop_together() -> None:
    bound = Bound(2, shared=True)
    barrier = threading.Barrier(4, timeout=30)
    held: list[int] = []
    lock = threading.Lock()

    async def use() -> None:
        async def one() -> None:
            async with bound:
                with lock:
                    held.append(bound.in_use)
                for _ in range(3):
                    await anyio.lowlevel.checkpoint()

        barrier.wait()
        async with anyio.create_task_group() as group:
            for _ in range(8):
                group.start_soon(one)

    threads = [
        threading.Thread(target=anyio.run, args=(use,), kwargs={"backend": name})
        for name in ("asyncio", "trio", "asyncio", "trio")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(held) == 32
    assert max(held) <= 2
    assert (bound.in_use, bound.peak) == (0, 2)
