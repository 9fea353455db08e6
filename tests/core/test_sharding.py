"""aioloader.core._sharding: global-batch slices, torch's DistributedSampler layout, bad input."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st

from aioloader.core import (
    BucketedSampler,
    MixingSampler,
    SequentialSampler,
    ShuffledSampler,
    plan_batch,
)
from aioloader.core._sharding import DistributedSampler, RankSlice, batch_sizes_of

SEED = 20240611


def _epoch(sampler: Any, seed: int, epoch: int) -> list[list[int]]:
    return [sampler.indices(seed, epoch, s).tolist() for s in range(sampler.steps_per_epoch)]


def _global_samplers() -> list[Any]:
    lengths = [(i * 37) % 101 for i in range(96)]
    return [
        SequentialSampler(96, 8),
        SequentialSampler(120, 16, drop_last=False),  # short last batch of 8
        ShuffledSampler(120, 16, drop_last=False),
        ShuffledSampler(101, 16),
        MixingSampler([30, 50, 20], [0.5, 0.25, 0.25], 8, steps_per_epoch=5),
        BucketedSampler(lengths, 8, pool_batches=3),
    ]


# -- RankSlice -----------------------------------------------------------------------------


def test_rank_slice_example() -> None:
    sampler = SequentialSampler(16, 8)
    slices = [RankSlice(sampler, r, 4) for r in range(4)]
    assert [_epoch(s, 0, 0) for s in slices] == [
        [[0, 1], [8, 9]],
        [[2, 3], [10, 11]],
        [[4, 5], [12, 13]],
        [[6, 7], [14, 15]],
    ]
    assert [s.steps_per_epoch for s in slices] == [2, 2, 2, 2]
    assert slices[1].indices(0, 0, 0).dtype == np.int64


@pytest.mark.parametrize("world_size", [1, 2, 4, 8])
@pytest.mark.parametrize("sampler", _global_samplers(), ids=repr)
def test_slices_concatenate_to_the_global_batch(sampler: Any, world_size: int) -> None:
    slices = [RankSlice(sampler, r, world_size) for r in range(world_size)]
    steps = sampler.steps_per_epoch
    assert [s.steps_per_epoch for s in slices] == [steps] * world_size
    for g in range(2 * steps + 1):  # two epochs and a step
        whole = plan_batch(sampler, SEED, g).indices
        parts = [plan_batch(s, SEED, g).indices for s in slices]
        assert len({p.shape[0] for p in parts}) == 1  # every rank gets the same batch size
        assert np.concatenate(parts).tolist() == whole.tolist()


@given(seed=st.integers(0, 2**64 - 1), g=st.integers(0, 10**6), world_size=st.sampled_from([2, 4]))
@settings(max_examples=50, deadline=None)
def test_global_stream_is_independent_of_world_size(seed: int, g: int, world_size: int) -> None:
    sampler = ShuffledSampler(100, 8, drop_last=False)
    joined = np.concatenate(
        [plan_batch(RankSlice(sampler, r, world_size), seed, g).indices for r in range(world_size)]
    )
    assert joined.tolist() == plan_batch(sampler, seed, g).indices.tolist()


def test_short_last_batch_is_sliced_too() -> None:
    sampler = SequentialSampler(100, 8, drop_last=False)  # steps 0..12, the last holds 4
    assert [RankSlice(sampler, r, 4).indices(0, 0, 12).tolist() for r in range(4)] == [
        [96],
        [97],
        [98],
        [99],
    ]
    assert RankSlice(sampler, 0, 4).batch_sizes == frozenset({2, 1})
    assert [RankSlice(sampler, 1, 4).slot_range(n) for n in (8, 4)] == [(2, 4), (1, 2)]
    assert RankSlice(sampler, 3, 4).global_slots(0, 0, 12).tolist() == [3]
    assert RankSlice(sampler, 3, 4).global_slots(0, 0, 0).tolist() == [6, 7]
    single = RankSlice(MixingSampler([10], [1.0], 6), 2, 3)  # one batch size: no batch built
    assert single.global_slots(0, 0, 0).tolist() == [4, 5]
    with pytest.raises(ValueError, match=r"step must be an integer in \[0, steps_per_epoch\)"):
        single.global_slots(0, 0, 1)


def test_batch_sizes_of_known_samplers() -> None:
    assert batch_sizes_of(SequentialSampler(10, 3)) == frozenset({3})
    assert batch_sizes_of(SequentialSampler(10, 3, drop_last=False)) == frozenset({3, 1})
    assert batch_sizes_of(ShuffledSampler(9, 3, drop_last=False)) == frozenset({3})
    assert batch_sizes_of(SequentialSampler(2, 3)) == frozenset()
    assert batch_sizes_of(SequentialSampler(2, 3, drop_last=False)) == frozenset({2})
    assert batch_sizes_of(MixingSampler([5], [1.0], 4)) == frozenset({4})
    assert batch_sizes_of(BucketedSampler([1, 2, 3], 2, 1)) == frozenset({2})
    assert batch_sizes_of(BucketedSampler([1, 2, 3], 4, 1)) == frozenset()
    assert batch_sizes_of(DistributedSampler(10, 2, 0, 4)) == frozenset({2, 1})
    assert batch_sizes_of(RankSlice(SequentialSampler(16, 8), 0, 2)) == frozenset({4})
    assert batch_sizes_of(_Opaque()) is None


def test_nested_slices() -> None:
    inner = RankSlice(SequentialSampler(16, 8), 1, 2)  # [4, 5, 6, 7] at step 0
    assert RankSlice(inner, 1, 2).indices(0, 0, 0).tolist() == [6, 7]
    with pytest.raises(ValueError, match="divisible by world_size = 8"):
        RankSlice(inner, 0, 8)


class _Opaque:
    """A sampler that does not declare its batch sizes: 6 then 5 indices."""

    steps_per_epoch = 2

    def indices(self, seed: int, epoch: int, step: int) -> Any:
        return np.arange(6 - step, dtype=np.int64) + 10 * step


def test_undeclared_batch_sizes_are_checked_per_step() -> None:
    sliced = RankSlice(_Opaque(), 1, 2)
    assert sliced.batch_sizes is None
    assert sliced.indices(0, 0, 0).tolist() == [3, 4, 5]
    with pytest.raises(ValueError, match=r"divisible by world_size = 2 but .* batch of 5"):
        sliced.indices(0, 0, 1)


def test_indivisible_batch_size_is_refused() -> None:
    with pytest.raises(
        ValueError,
        match=r"global batch size must be divisible by world_size = 3 but "
        r"SequentialSampler\(n=16, batch_size=8, drop_last=True\) gives a batch of 8",
    ):
        RankSlice(SequentialSampler(16, 8), 0, 3)
    # The short last batch (100 - 12 * 8 = 4) is checked as well as the full ones.
    with pytest.raises(ValueError, match=r"world_size = 8 but .* gives a batch of 4"):
        RankSlice(SequentialSampler(100, 8, drop_last=False), 0, 8)


@pytest.mark.parametrize(
    ("rank", "world_size", "error", "message"),
    [
        (4, 4, ValueError, r"rank must be an integer in \[0, world_size\) = \[0, 4\) but got 4"),
        (-1, 4, ValueError, r"rank must be an integer in \[0, world_size\) = \[0, 4\) but got -1"),
        (0, 0, ValueError, r"world_size must be an integer in \[1, 2\^63\) but got 0"),
        (True, 2, TypeError, r"rank must be an integer but got a bool"),
        (0, 2.0, TypeError, r"world_size must be an integer but got float"),
    ],
)
def test_bad_rank_arguments(rank: Any, world_size: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        RankSlice(SequentialSampler(16, 8), rank, world_size)
    with pytest.raises(error, match=message):
        DistributedSampler(16, 2, rank, world_size)


def test_rank_slice_refuses_a_non_sampler() -> None:
    with pytest.raises(TypeError, match=r"sampler must have steps_per_epoch .* but got list"):
        RankSlice([1, 2], 0, 1)  # type: ignore[arg-type]


def test_rank_slice_repr() -> None:
    assert repr(RankSlice(SequentialSampler(16, 8), 1, 2)) == (
        "RankSlice(SequentialSampler(n=16, batch_size=8, drop_last=True), rank=1, world_size=2)"
    )


# -- DistributedSampler --------------------------------------------------------------------


def test_background_example_ten_samples_on_four_ranks() -> None:
    padded = [DistributedSampler(10, 3, r, 4) for r in range(4)]
    assert [s.num_samples for s in padded] == [3, 3, 3, 3]
    assert [s.epoch_indices(0, 0).tolist() for s in padded] == [
        [0, 4, 8],
        [1, 5, 9],
        [2, 6, 0],  # ranks 2 and 3 see examples 0 and 1 a second time
        [3, 7, 1],
    ]
    cut = [DistributedSampler(10, 3, r, 4, drop_last=True) for r in range(4)]
    assert [s.epoch_indices(0, 0).tolist() for s in cut] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert {8, 9}.isdisjoint(itertools.chain(*(s.epoch_indices(0, 0).tolist() for s in cut)))
    assert [s.total_size for s in (padded[0], cut[0])] == [12, 8]


def _torch_sampler(
    n: int, rank: int, world_size: int, drop_last: bool
) -> torch.utils.data.DistributedSampler[int]:
    return torch.utils.data.DistributedSampler(
        range(n),  # type: ignore[arg-type]
        num_replicas=world_size,
        rank=rank,
        shuffle=False,
        drop_last=drop_last,
    )


def _torch_indices(n: int, rank: int, world_size: int, drop_last: bool) -> list[int]:
    return list(_torch_sampler(n, rank, world_size, drop_last))


def _torch_batches(
    n: int, batch_size: int, rank: int, world_size: int, drop_last: bool, drop_last_batch: bool
) -> list[list[int]]:
    sampler = _torch_sampler(n, rank, world_size, drop_last)
    return list(torch.utils.data.BatchSampler(sampler, batch_size, drop_last_batch))


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5, 7, 8, 16])
def test_equals_torch_distributed_sampler(world_size: int, drop_last: bool) -> None:
    for n in range(1, 41):
        for rank in range(world_size):
            ours = DistributedSampler(n, 4, rank, world_size, drop_last=drop_last)
            expected = _torch_indices(n, rank, world_size, drop_last)
            assert ours.num_samples == len(expected)
            assert ours.epoch_indices(SEED, 3).tolist() == expected


@pytest.mark.parametrize("drop_last_batch", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize(("n", "batch_size", "world_size"), [(10, 3, 4), (37, 4, 3), (5, 2, 8)])
def test_batches_equal_torch_batch_sampler(
    n: int, batch_size: int, world_size: int, drop_last: bool, drop_last_batch: bool
) -> None:
    steps = set()
    for rank in range(world_size):
        ours = DistributedSampler(
            n, batch_size, rank, world_size, drop_last=drop_last, drop_last_batch=drop_last_batch
        )
        expected = _torch_batches(n, batch_size, rank, world_size, drop_last, drop_last_batch)
        steps.add(ours.steps_per_epoch)
        assert ours.steps_per_epoch == len(expected)
        assert _epoch(ours, SEED, 0) == expected
    assert len(steps) == 1  # every rank takes the same number of steps


def test_short_last_batch_rule() -> None:
    # 10 on 4 ranks: 3 indices per rank; batch_size 2 gives a full batch then a short one.
    sampler = DistributedSampler(10, 2, 3, 4)
    assert _epoch(sampler, 0, 0) == [[3, 7], [1]]
    assert sampler.batch_sizes == frozenset({2, 1})
    dropped = DistributedSampler(10, 2, 3, 4, drop_last_batch=True)
    assert _epoch(dropped, 0, 0) == [[3, 7]]
    assert dropped.batch_sizes == frozenset({2})


def test_more_ranks_than_items() -> None:
    # Padding repeats the whole list as often as needed, as torch does.
    assert [DistributedSampler(3, 2, r, 8).epoch_indices(0, 0).tolist() for r in range(8)] == [
        [0],
        [1],
        [2],
        [0],
        [1],
        [2],
        [0],
        [1],
    ]
    empty = DistributedSampler(3, 2, 0, 8, drop_last=True)
    assert (empty.num_samples, empty.steps_per_epoch) == (0, 0)
    assert empty.epoch_indices(0, 0).tolist() == []
    with pytest.raises(ValueError, match="steps_per_epoch is 0"):
        empty.indices(0, 0, 0)


def test_shuffled_on_one_rank_is_the_shuffled_sampler() -> None:
    ours = DistributedSampler(37, 5, 0, 1, shuffle=True)
    reference = ShuffledSampler(37, 5, drop_last=False)
    for epoch in (0, 1, 9):
        assert _epoch(ours, SEED, epoch) == _epoch(reference, SEED, epoch)


def test_shuffled_ranks_interleave_the_epoch_order() -> None:
    n, world_size = 37, 4
    order = np.concatenate(_epoch(ShuffledSampler(n, n, drop_last=False), SEED, 2))
    padded = np.concatenate([order, order[: 40 - n]])
    for rank in range(world_size):
        ours = DistributedSampler(n, 4, rank, world_size, shuffle=True)
        assert ours.epoch_indices(SEED, 2).tolist() == padded[rank::world_size].tolist()
    first = DistributedSampler(n, 4, 0, world_size, shuffle=True)
    assert first.epoch_indices(SEED, 0).tolist() != first.epoch_indices(SEED, 1).tolist()
    assert first.epoch_indices(SEED, 0).tolist() != first.epoch_indices(SEED + 1, 0).tolist()


def test_distributed_sampler_properties_and_repr() -> None:
    sampler = DistributedSampler(10, 3, 2, 4, shuffle=True, drop_last=True)
    assert (sampler.n, sampler.batch_size, sampler.rank, sampler.world_size) == (10, 3, 2, 4)
    assert (sampler.shuffle, sampler.drop_last, sampler.drop_last_batch) == (True, True, False)
    assert (sampler.num_samples, sampler.total_size, sampler.steps_per_epoch) == (2, 8, 1)
    assert repr(sampler) == (
        "DistributedSampler(n=10, batch_size=3, rank=2, world_size=4, shuffle=True, "
        "drop_last=True, drop_last_batch=False)"
    )


def test_distributed_sampler_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"n must be an integer in \[1, 2\^63\) but got 0"):
        DistributedSampler(0, 2, 0, 1)
    with pytest.raises(ValueError, match=r"batch_size must be an integer in \[1, 2\^24\]"):
        DistributedSampler(10, 0, 0, 1)
    with pytest.raises(TypeError, match="shuffle must be a bool but got int"):
        DistributedSampler(10, 2, 0, 1, shuffle=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="drop_last_batch must be a bool but got str"):
        DistributedSampler(10, 2, 0, 1, drop_last_batch="no")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"step must be an integer in \[0, steps_per_epoch\)"):
        DistributedSampler(10, 2, 0, 4).indices(0, 0, 2)
    with pytest.raises(ValueError, match=r"epoch must be an integer in \[0, 2\^64\) but got -1"):
        DistributedSampler(10, 2, 0, 4).indices(0, -1, 0)
