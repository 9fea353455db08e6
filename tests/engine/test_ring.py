"""aioloader.engine._ring: the ordered prefetch ring's rules."""

from __future__ import annotations

import anyio
import pytest

from aioloader import LoaderClosedError
from aioloader.engine import PrefetchRing
from aioloader.engine._ring import WouldBlock


def test_claim_window_is_next_to_take_plus_capacity() -> None:
    ring: PrefetchRing[str] = PrefetchRing(3, start=10, stop=None)
    assert [ring.claim_nowait() for _ in range(3)] == [10, 11, 12]
    with pytest.raises(WouldBlock):
        ring.claim_nowait()
    ring.fill_nowait(11, "b11")
    with pytest.raises(WouldBlock):
        ring.take_nowait()  # 10 is not ready: order is kept
    ring.fill_nowait(10, "b10")
    assert ring.take_nowait() == "b10"
    assert ring.claim_nowait() == 13  # the window moved by one
    assert ring.take_nowait() == "b11"
    stats = ring.statistics()
    assert (stats.next_to_take, stats.next_to_claim, stats.building, stats.ready) == (12, 14, 2, 0)


def test_stop_and_error_end_the_stream() -> None:
    ring: PrefetchRing[str] = PrefetchRing(4, start=0, stop=3)
    assert [ring.claim_nowait() for _ in range(4)] == [0, 1, 2, None]
    ring.fill_nowait(2, "late")
    ring.fill_nowait(1, None, KeyError("boom"))
    ring.fill_nowait(0, "first")
    assert ring.take_nowait() == "first"
    with pytest.raises(KeyError, match="boom"):
        ring.take_nowait()
    with pytest.raises(StopAsyncIteration):
        ring.take_nowait()


def test_close_releases_filled_and_late_batches() -> None:
    released: list[str] = []
    ring: PrefetchRing[str] = PrefetchRing(2, 0, None, released.append)
    ring.claim_nowait()
    ring.claim_nowait()
    ring.fill_nowait(1, "one")
    ring.close_nowait()
    ring.fill_nowait(0, "zero")
    assert released == ["one", "zero"]
    assert ring.claim_nowait() is None
    with pytest.raises(LoaderClosedError, match="the batch stream is closed"):
        ring.take_nowait()


@pytest.mark.anyio
async def test_async_take_waits_for_fill() -> None:
    ring: PrefetchRing[int] = PrefetchRing(2, 0, 2)
    results: list[int] = []

    async def consumer() -> None:
        results.append(await ring.take())
        results.append(await ring.take())

    async with anyio.create_task_group() as group:
        group.start_soon(consumer)
        first, second = await ring.claim(), await ring.claim()
        assert (first, second) == (0, 1)
        ring.fill_nowait(1, 101)
        ring.fill_nowait(0, 100)
    assert results == [100, 101]
    assert await ring.claim() is None


def test_statistics_show_capacity_and_depth_apart() -> None:
    ring: PrefetchRing[str] = PrefetchRing(8, start=0, stop=None, depth=3)
    stats = ring.statistics()
    assert (stats.capacity, stats.depth) == (8, 3)
    ring.deepen(5)
    stats = ring.statistics()
    assert (stats.capacity, stats.depth) == (8, 5)


class Receipts:
    """What the sync facade's hand-off tells a lending ring: batches its consumer took."""

    def __init__(self) -> None:
        self.received = 0
        self.armed: list[object] = []

    def collect(self, wake: object) -> int:
        received, self.received = self.received, 0
        if not received:
            self.armed.append(wake)
        return received


def test_a_lent_batch_holds_its_place_in_the_window_until_it_is_received() -> None:
    ring: PrefetchRing[str] = PrefetchRing(3, start=0, stop=None)
    receipts = Receipts()
    ring.lend(receipts)
    assert [ring.claim_nowait() for _ in range(3)] == [0, 1, 2]
    for step in range(3):
        ring.fill_nowait(step, f"b{step}")
    assert [ring.take_nowait() for _ in range(3)] == ["b0", "b1", "b2"]  # all lent
    with pytest.raises(WouldBlock):
        ring.claim_nowait()  # taken but not received: they still count
    assert len(receipts.armed) == 1  # the ring asked to be woken at the next receipt
    receipts.received = 2
    assert [ring.claim_nowait(), ring.claim_nowait()] == [3, 4]
    with pytest.raises(WouldBlock):
        ring.claim_nowait()
    stats = ring.statistics()
    assert (stats.next_to_take, stats.next_to_claim, stats.lent) == (3, 5, 1)
    assert len(receipts.armed) == 2
