"""aioloader.core._plan: global step to (epoch, step, indices, keys)."""

from __future__ import annotations

import pytest

from aioloader.core import SequentialSampler, ShuffledSampler, derive, plan_batch, split_global_step


def test_split_global_step() -> None:
    assert split_global_step(0, 4) == (0, 0)
    assert split_global_step(9, 4) == (2, 1)
    with pytest.raises(ValueError, match=r"^steps_per_epoch must be >= 1 but got 0"):
        split_global_step(3, 0)
    with pytest.raises(
        ValueError, match=r"^global_step must be an integer in \[0, 2\^64\) but got -1$"
    ):
        split_global_step(-1, 4)


def test_plan_crosses_epochs() -> None:
    sampler = ShuffledSampler(10, 3)
    plan = plan_batch(sampler, 5, 7)
    assert (plan.epoch, plan.step, plan.global_step, plan.seed) == (2, 1, 7, 5)
    assert plan.indices.tolist() == sampler.indices(5, 2, 1).tolist()
    assert plan.size == 3


def test_plan_keys_are_derive_per_slot() -> None:
    plan = plan_batch(SequentialSampler(10, 4), 77, 3)
    assert plan.transform_keys().tolist() == [derive(77, 1, 1, slot, 0) for slot in range(4)]
    assert plan.augment_keys().tolist() == [derive(77, 1, 1, slot, 1) for slot in range(4)]
    assert plan.rng_keys(42).tolist() == [derive(77, 1, 1, slot, 42) for slot in range(4)]


def test_rank_slices_draw_the_keys_of_their_global_slots() -> None:
    from aioloader.core import RankSlice

    whole = plan_batch(ShuffledSampler(64, 8), 9, 5)
    parts = [plan_batch(RankSlice(ShuffledSampler(64, 8), r, 4), 9, 5) for r in range(4)]
    assert [k for p in parts for k in p.augment_keys().tolist()] == whole.augment_keys().tolist()
    assert [
        k for p in parts for k in p.transform_keys().tolist()
    ] == whole.transform_keys().tolist()
    assert [i for p in parts for i in p.indices.tolist()] == whole.indices.tolist()
