"""aioloader.engine._handoff: batches cross from the event loop to a consumer thread."""

from __future__ import annotations

import anyio
import pytest

from aioloader._event_loops import threadsafe_caller
from aioloader.engine._handoff import BatchHandOff, HandOffClosed

pytestmark = pytest.mark.anyio


async def test_the_producer_waits_for_a_free_slot_and_order_is_kept() -> None:
    hand_off: BatchHandOff[int] = BatchHandOff(2, threadsafe_caller(), lambda _: None)
    put: list[int] = []

    async def produce() -> None:
        for item in range(3):
            await hand_off.put(item)
            put.append(item)
        hand_off.finish()

    async with anyio.create_task_group() as group:
        group.start_soon(produce)
        await anyio.wait_all_tasks_blocked()
        assert put == [0, 1]  # both slots full: the third put waits
        assert await anyio.to_thread.run_sync(hand_off.take) == 0
        await anyio.wait_all_tasks_blocked()
        assert put == [0, 1, 2]
    assert [hand_off.take(), hand_off.take()] == [1, 2]
    with pytest.raises(StopIteration):
        hand_off.take()
    with pytest.raises(StopIteration):  # the end stays the end
        hand_off.take()


async def test_an_error_comes_after_the_items_before_it() -> None:
    hand_off: BatchHandOff[int] = BatchHandOff(4, threadsafe_caller(), lambda _: None)
    await hand_off.put(7)
    hand_off.finish(KeyError("step 1"))
    assert hand_off.take() == 7
    with pytest.raises(KeyError, match="step 1"):
        hand_off.take()


async def test_closing_releases_what_was_not_taken_and_stops_the_producer() -> None:
    released: list[int] = []
    hand_off: BatchHandOff[int] = BatchHandOff(2, threadsafe_caller(), released.append)
    outcome: list[str] = []

    async def produce() -> None:
        try:
            for item in range(5):
                await hand_off.put(item)
        except HandOffClosed:
            outcome.append("closed")

    async with anyio.create_task_group() as group:
        group.start_soon(produce)
        await anyio.wait_all_tasks_blocked()
        assert hand_off.take() == 0
        await anyio.wait_all_tasks_blocked()  # items 1 and 2 wait, item 3 waits for a slot
        await anyio.to_thread.run_sync(hand_off.close)
    assert outcome == ["closed"]
    assert released == [1, 2, 3]  # item 4 was never made


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity must be >= 1 but got 0"):
        BatchHandOff(0, lambda _: None, lambda _: None)


async def test_collect_counts_what_was_taken_and_wakes_the_loop_at_the_next_take() -> None:
    hand_off: BatchHandOff[int] = BatchHandOff(4, threadsafe_caller(), lambda _: None)
    woken = anyio.Event()
    for item in range(3):
        await hand_off.put(item)
    assert hand_off.take() == 0
    assert hand_off.collect(woken.set) == 1  # counted: nothing armed
    assert hand_off.collect(woken.set) == 0  # none since: the next take wakes the loop
    assert not woken.is_set()
    assert await anyio.to_thread.run_sync(hand_off.take) == 1
    with anyio.fail_after(30):
        await woken.wait()
    assert hand_off.collect(woken.set) == 1


async def test_only_the_first_end_counts() -> None:
    hand_off: BatchHandOff[int] = BatchHandOff(2, threadsafe_caller(), lambda _: None)
    hand_off.finish(SystemExit(3))
    hand_off.finish(KeyError("later"))
    hand_off.finish()
    with pytest.raises(SystemExit) as caught:
        hand_off.take()
    assert caught.value.code == 3
