"""The room rules of read-ahead runs (``_room``): what part of a run a step reads."""

from __future__ import annotations

from aioloader.sources.cache._planner import NEVER
from aioloader.sources.cache._policy import ReadBudget
from aioloader.sources.cache._room import URGENT_STEPS, RunTaker

STEP = 10
LOOKAHEAD = 4
# the next uses of a shard's eight samples: the group of steps 12-18, one sample at step 30
NEXT_USE = dict(enumerate([12, 13, 14, 15, 16, 17, 18, 30]))


def _taker(reserved: list[int], *, whole: bool) -> RunTaker:
    """A taker whose memory has no spare room: a run gets room only by evicting entries
    needed after it (``wanted`` below ``NEVER - 1``); ``reserved`` records what it took."""

    def make_room(size: int, later: int, wanted: int) -> bool:
        if wanted >= NEVER - 1:
            return False
        reserved.append(size)
        return True

    return RunTaker(
        (STEP, lambda later: later + LOOKAHEAD),
        lambda unit: True,
        lambda unit: 1,
        NEXT_USE.__getitem__,
        make_room,
        ReadBudget(100),
        lambda: whole,
    )


def test_a_run_at_need_keeps_the_samples_needed_soon_after_the_step_it_is_read_for() -> None:
    reserved: list[int] = []
    later = STEP + URGENT_STEPS  # at need: two steps ahead
    got = _taker(reserved, whole=False).take(list(range(8)), 0, later)
    # needed by step 12 + 4 = 16: samples 0-4 (not by step 10 + 4 = 14: 0-2 only)
    assert got == [0, 1, 2, 3, 4]
    assert reserved == [5]


def test_a_whole_run_at_need_takes_every_sample() -> None:
    reserved: list[int] = []
    assert _taker(reserved, whole=True).take(list(range(8)), 0, STEP + 1) == list(range(8))
    assert reserved == [8]


def test_a_run_ahead_of_need_without_spare_room_waits() -> None:
    reserved: list[int] = []
    assert _taker(reserved, whole=True).take(list(range(8)), 0, STEP + URGENT_STEPS + 1) == []
    assert reserved == []
