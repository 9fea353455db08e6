"""Streams sharing one cache: fair shares of what no plan reads again, streams expected
back, and each stream's next pass ranking what it reads (with one stream: as before)."""

from __future__ import annotations

from aioloader.core import SequentialSampler
from aioloader.sources.cache._planner import NEVER, HorizonPlanner
from aioloader.sources.cache._plans import Plans
from aioloader.sources.cache._policy import EvictionOrder, Sharing
from aioloader.sources.cache._tiers import MemoryTier


def _order(owners: dict[int, str | None]) -> EvictionOrder:
    """Entries beyond the plans, ``unit`` used at step ``unit`` by its owner."""
    order = EvictionOrder("belady")
    for unit, owner in owners.items():
        order.used(unit, unit, owner)
        order.push(unit, NEVER)
    return order


OWNERS = {0: "train", 1: "train", 2: "train", 3: "eval", 4: "eval", 5: None}
SIZES = dict.fromkeys(OWNERS, 10)


def test_alone_the_latest_used_goes_first_whoever_used_it() -> None:
    assert _order(OWNERS).pop_victims(30, 100, SIZES) == [5, 4, 3]
    assert _order(OWNERS).pop_victims(30, 100, SIZES, used_since=4) is None  # 3 is older


def test_another_streams_entries_go_only_out_of_what_it_holds_over_its_share() -> None:
    # eval reads ahead: its own and no stream's entries go, the latest used first; train's
    # are spared while train holds no more than its share
    order = _order(OWNERS)
    assert order.pop_victims(30, 100, SIZES, others={"train": 0}) == [5, 4, 3]
    assert order.pop_victims(10, 100, SIZES, others={"train": 0}) is None
    assert len(order) == 3  # untouched
    # train over its share by 15: its latest used go first, out of the excess only
    order = _order(OWNERS)
    assert order.pop_victims(40, 100, SIZES, others={"train": 15}) == [2, 1, 5, 4]
    order = _order(OWNERS)  # the reader's own are held to used_since; the excess is not
    assert order.pop_victims(20, 100, SIZES, used_since=4, others={"train": 15}) == [2, 1]
    assert order.pop_victims(10, 100, SIZES, used_since=4, others={"train": -5}) == [5]
    assert order.pop_victims(10, 100, SIZES, used_since=4, others={"train": -5}) == [4]
    assert order.pop_victims(10, 100, SIZES, used_since=4, others={"train": -5}) is None


def test_unknown_against_unknown_the_reader_under_its_share_takes_the_excess() -> None:
    order = _order(OWNERS)
    assert order.pop_victims(10, NEVER, SIZES, others={"train": 15}) is None
    assert order.pop_victims(10, NEVER, SIZES, others={"train": 15}, under=10) == [2]
    assert order.pop_victims(10, NEVER, SIZES, others={"train": 15}, under=0) is None


def test_entries_a_plan_reads_again_are_ranked_over_every_stream() -> None:
    order = EvictionOrder("belady")
    order.used(0, 0, "eval")
    order.push(0, 50)  # eval's plan reads it at 50
    order.used(1, 1, "train")
    order.push(1, 80)  # train's at 80
    sizes = {0: 10, 1: 10}
    assert order.pop_victims(10, 60, sizes, others={"train": 0}) == [1]  # furthest first
    assert order.pop_victims(10, 60, sizes, others={"train": 0}) is None  # 50 comes first


def test_a_tier_counts_each_streams_bytes_and_read_ahead_room() -> None:
    tier = MemoryTier(100, "belady")
    for unit, owner in ((0, "train"), (1, "train"), (2, "eval")):
        tier.put(unit, bytes(20))
        tier.rank(unit, NEVER, unit, owner)
    tier.reserve(30, "train")
    assert tier.held == {"train": 70, "eval": 20}
    sharing = Sharing("eval", ("train", "eval"))
    # eval wants 20: train holds 70 against a share of 50, so its latest entry goes
    assert tier.room_for(20, 100, sharing=sharing) == [1]
    tier.take(1, evicted=True)
    tier.unreserve(30, "train")
    tier.rank(2, NEVER, 9, "train")  # train used eval's entry last: it is train's now
    assert tier.held == {"train": 40}
    assert tier.room_for(80, 100, sharing=Sharing("eval", ("train", "eval"))) is None


def _planner(stop: int) -> HorizonPlanner:
    return HorizonPlanner(
        SequentialSampler(64, 8), 0, 0, window_steps=8, windows=1, slack=0, stop_step=stop
    )


def _next_pass(start: int) -> HorizonPlanner:
    planner = HorizonPlanner(SequentialSampler(64, 8), 0, start, window_steps=8, windows=1, slack=0)
    planner.fill()
    return planner


def test_a_stream_that_ended_is_expected_back_until_a_new_stream_or_forget() -> None:
    plans = Plans()
    train = plans.add("train", _planner(8), -1, _next_pass(8))
    assert plans.sharing == ("train",)
    assert plans.next_use(3) == 8  # its next pass reads it first (step 8, offset 0)
    evaluate = plans.add("eval", _planner(4), 7, _next_pass(4))
    assert plans.sharing == ("train", "eval")
    assert plans.next_use(3) == 8  # train's next pass reads it first (step 8, offset 0)
    assert plans.next_use(35) == 8 + 4  # eval's: step 4 at offset 8
    plans.end(evaluate)
    assert plans.sharing == ("train", "eval")  # expected back
    assert len(plans) == 1
    assert plans.next_use(35) == 12
    plans.end(train)
    assert plans.sharing == ("eval", "train")  # both ended, in the order they ended
    plans.add("eval", _planner(4), 20, _next_pass(4))  # the same stream: train stays
    assert plans.sharing == ("eval", "train")
    assert plans.forget("train") is True  # expected back no more
    assert plans.forget("train") is False
    assert plans.sharing == ("eval",)
    ended = plans.get("eval")
    assert ended is not None
    plans.end(ended)
    plans.add("test", _planner(4), 30)  # never seen: the streams that ended are gone
    assert plans.sharing == ("test",)
