"""ReorderWindow: results in input order, bounded in items and in bytes held."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import pytest

from aioloader.ingest._window import ReorderWindow

pytestmark = pytest.mark.anyio


async def _numbers(count: int) -> AsyncIterator[int]:
    for number in range(count):
        yield number


async def test_results_come_in_input_order_with_a_slow_head() -> None:
    head_may_finish = anyio.Event()
    finished: list[int] = []

    async def work(number: int) -> bytes:
        if number == 0:
            await head_may_finish.wait()
        finished.append(number)
        if len(finished) == 5:
            head_may_finish.set()
        return bytes(10)

    window = ReorderWindow(work, max_items=8, max_bytes=10_000, size_of=len)
    async with window.open(_numbers(20)) as results:
        got = [len(result) async for result in results]
    assert got == [10] * 20
    assert set(finished[:5]) <= set(range(1, 8))  # later inputs finished before the head
    assert sorted(finished) == list(range(20))
    assert window.held_bytes == 0


async def test_the_bytes_held_never_pass_the_bound() -> None:
    """Results of 100 bytes behind a slow head, bound 350: three fit, the fourth waits."""
    head_may_finish = anyio.Event()
    sized: list[int] = []
    order: list[int] = []

    async def work(number: int) -> tuple[int, bytes]:
        if number == 0:
            await head_may_finish.wait()
        return number, bytes(100)

    def size_of(result: tuple[int, bytes]) -> int:
        sized.append(result[0])
        if len(sized) == 4:  # three held and a fourth waiting: the window is full
            head_may_finish.set()
        return len(result[1])

    window = ReorderWindow(work, max_items=50, max_bytes=350, size_of=size_of)
    async with window.open(_numbers(40)) as results:
        async for number, _ in results:
            order.append(number)
    assert order == list(range(40))
    assert window.peak_bytes == 300
    assert window.held_bytes == 0


async def test_a_full_window_starts_nothing_new_until_its_head_ends() -> None:
    head_may_finish = anyio.Event()
    started: list[int] = []
    seen_at_head_end: list[tuple[int, int]] = []

    async def work(number: int) -> int:
        started.append(number)
        if len(started) == 4:  # whichever starts fourth (trio may start the head last)
            head_may_finish.set()
        if number == 0:
            await head_may_finish.wait()
            for _ in range(8):  # let the three behind the head finish and be held
                await anyio.lowlevel.checkpoint()
            seen_at_head_end.append((len(started), window.held_bytes))
        return number

    window = ReorderWindow(work, max_items=4, max_bytes=1 << 20, size_of=lambda _: 1)
    async with window.open(_numbers(10)) as results:
        got = [number async for number in results]
    assert got == list(range(10))
    assert seen_at_head_end == [(4, 3)]  # four started, three finished behind the head


async def test_a_failure_is_raised_at_its_position() -> None:
    async def work(number: int) -> int:
        if number == 3:
            raise KeyError(number)
        return number

    window = ReorderWindow(work, max_items=4, max_bytes=100, size_of=lambda _: 1)
    got: list[int] = []

    async def consume() -> None:
        async with window.open(_numbers(10)) as results:
            async for number in results:
                got.append(number)

    with pytest.raises(KeyError):
        await consume()
    assert got == [0, 1, 2]


async def test_a_pool_of_tasks_maps_the_inputs_and_grows_only_to_the_concurrency_used() -> None:
    gate = anyio.Event()
    running = 0
    most = 0

    async def work(number: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        if number < 6:  # six inputs wait together, then every input runs alone
            if running == 6:
                gate.set()
            await gate.wait()
        running -= 1
        return number

    window = ReorderWindow(work, max_items=32, max_bytes=1 << 20, size_of=lambda _: 1)
    async with window.open(_numbers(500)) as results:
        got = [number async for number in results]
    assert got == list(range(500))
    assert most >= 6
    assert window.workers <= most + 1  # tasks made: the concurrency, not 500
    upstream_closed = anyio.Event()

    async def numbers_then_note_the_close() -> AsyncIterator[int]:
        try:
            for number in range(10):
                yield number
        finally:
            upstream_closed.set()

    async with window.open(numbers_then_note_the_close()) as results:
        assert await results.__anext__() == 0
    assert upstream_closed.is_set()  # leaving early closes upstream


def test_bounds_must_be_positive() -> None:
    async def work(number: int) -> int:
        return number

    with pytest.raises(ValueError, match="max_bytes must be an integer >= 1 but got 0"):
        ReorderWindow(work, max_items=1, max_bytes=0, size_of=lambda _: 1)


def test_a_bool_bound_is_refused_by_name() -> None:
    async def work(number: int) -> int:
        return number

    with pytest.raises(
        TypeError, match=r"max_items must be an integer >= 1 but got a bool \(True\)"
    ):
        ReorderWindow(work, max_items=True, max_bytes=1, size_of=lambda _: 1)
