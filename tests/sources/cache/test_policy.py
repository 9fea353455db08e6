"""EvictionOrder (Belady, latest used first among equals, LRU) and the read-ahead budget."""

from __future__ import annotations

from aioloader.sources.cache._planner import NEVER
from aioloader.sources.cache._policy import EvictionOrder, ReadBudget


def test_belady_evicts_the_furthest_next_use_first() -> None:
    order = EvictionOrder("belady")
    sizes = {1: 10, 2: 10, 3: 10}
    for unit, when in ((1, 5), (2, 50), (3, 20)):
        order.push(unit, when)
    assert order.pop_victims(15, 4, sizes) == [2, 3]
    assert 1 in order
    assert 2 not in order


def test_nothing_is_evicted_for_a_sample_needed_later_than_the_victims() -> None:
    order = EvictionOrder("belady")
    sizes = {1: 10, 2: 10}
    order.push(1, 5)
    order.push(2, 50)
    assert order.pop_victims(15, 30, sizes) is None  # 1 is needed sooner than step 30
    assert len(order) == 2  # untouched
    assert order.pop_victims(5, 30, sizes) == [2]
    order.push(2, NEVER)
    assert order.pop_victims(5, NEVER, sizes) is None  # unknown against unknown: refuse


def test_among_entries_beyond_the_horizon_the_latest_used_goes_first() -> None:
    order = EvictionOrder("belady")
    sizes = dict.fromkeys(range(4), 1)
    for unit in range(4):
        order.used(unit, 10 * unit)
        order.push(unit, NEVER)
    assert order.pop_victims(2, 10, sizes) == [3, 2]
    order.used(0, 50)
    order.push(0, NEVER)  # a hit at step 50: now the latest used
    assert order.pop_victims(1, 10, sizes) == [0]
    order.push(0, NEVER)  # ranked again without a use (a new plan): keeps step 50
    order.rank_all(NEVER)
    assert order.pop_victims(1, 10, sizes) == [0]


def test_read_ahead_evicts_only_what_its_epoch_has_used() -> None:
    order = EvictionOrder("belady")
    sizes = dict.fromkeys(range(3), 1)
    order.used(0, 5)
    order.push(0, NEVER)  # used at step 5, not read again by the known plan
    order.used(1, 40)
    order.push(1, NEVER)  # used at step 40
    order.push(2, 120)  # the plan reads it at step 120
    # an epoch from step 32: entry 1 was used in it, entry 0 may still be needed
    assert order.pop_victims(2, 63, sizes, used_since=32) is None
    assert len(order) == 3  # untouched
    assert order.pop_victims(1, 63, sizes, used_since=32) == [1]
    assert order.pop_victims(1, 63, sizes, used_since=0) == [0]  # used in that epoch
    assert order.pop_victims(1, 63, sizes, used_since=32) == [2]  # next read after 63


def test_lru_evicts_the_least_recently_ranked_whatever_the_next_use() -> None:
    order = EvictionOrder("lru")
    sizes = dict.fromkeys(range(3), 1)
    for unit in range(3):
        order.push(unit, 100)
    order.push(0, 1)
    assert order.pop_victims(2, NEVER, sizes) == [1, 2]
    order.discard(0)
    assert order.pop_victims(1, NEVER, sizes) is None


def test_the_read_ahead_budget_reserves_all_or_nothing() -> None:
    budget = ReadBudget(100)
    assert budget.take_all([40, 50])
    assert not budget.take_all([5, 6])
    assert budget.take_all([10])
    assert not budget.take_all([1])
    budget.give_back(10)
    assert budget.take_all([10])
