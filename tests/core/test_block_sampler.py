"""aioloader.core._block_sampler: definition, exactly-once epochs, resume, shuffle quality."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioloader.core import (
    BlockShuffledSampler,
    RankSlice,
    RngStream,
    ShuffledSampler,
    batch_sizes_of,
    derive,
    keyed_permutation,
    plan_batch,
)
from aioloader.core._block_sampler import (
    shard_ids_of,
    shard_pieces,
)


def _epoch(sampler: Any, seed: int, epoch: int) -> list[int]:
    return [
        i for step in range(sampler.steps_per_epoch) for i in sampler.indices(seed, epoch, step)
    ]


def _reference_epoch(sizes: list[int], window: int, seed: int, epoch: int) -> list[int]:
    """A straight scalar reading of the module docstring: the whole epoch, item by item."""
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    order_key = derive(seed, epoch, 0, 0, RngStream.BLOCK_SHARD_ORDER)
    order = [keyed_permutation(j, len(sizes), order_key) for j in range(len(sizes))]
    out: list[int] = []
    for b, first in enumerate(range(0, len(order), window)):
        items = [starts[k] + i for k in order[first : first + window] for i in range(sizes[k])]
        key = derive(seed, epoch, b, 0, RngStream.BLOCK_ITEM_ORDER)
        out.extend(items[keyed_permutation(q, len(items), key)] for q in range(len(items)))
    return out


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 9), min_size=1, max_size=12).filter(lambda s: sum(s) > 0),
    window=st.integers(1, 5),
    batch=st.integers(1, 7),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 3),
)
def test_matches_the_definition_and_serves_every_item_once(
    sizes: list[int], window: int, batch: int, seed: int, epoch: int
) -> None:
    sampler = BlockShuffledSampler(sizes, batch, window=window, drop_last=False)
    got = _epoch(sampler, seed, epoch)
    assert got == _reference_epoch(sizes, window, seed, epoch)
    assert sorted(got) == list(range(sum(sizes)))
    cut = BlockShuffledSampler(sizes, batch, window=window, drop_last=True)
    assert _epoch(cut, seed, epoch) == got[: (sum(sizes) // batch) * batch]


def test_golden_sequence() -> None:
    sampler = BlockShuffledSampler([4, 4, 4, 4], 4, window=2)
    assert sampler.shard_order(2024, 0).tolist() == [2, 1, 3, 0]
    assert [sampler.indices(2024, 0, s).tolist() for s in range(4)] == [
        [5, 4, 6, 11],  # block 0: shards 2 and 1, items 4..11
        [10, 7, 9, 8],
        [14, 0, 15, 13],  # block 1: shards 3 and 0
        [3, 12, 2, 1],
    ]
    assert sampler.steps_per_epoch == 4
    assert sampler.batch_sizes == frozenset({4})


def test_batches_read_few_shards_and_epochs_differ() -> None:
    sizes = [100] * 32
    sampler = BlockShuffledSampler(sizes, 64, window=4)
    for step in range(sampler.steps_per_epoch):
        shards = set(shard_ids_of(sampler.indices(5, 0, step), sizes).tolist())
        assert len(shards) <= 8  # at most two blocks of four shards
    assert _epoch(sampler, 5, 0) != _epoch(sampler, 5, 1)
    assert _epoch(sampler, 5, 0) != _epoch(sampler, 6, 0)
    assert _epoch(sampler, 5, 1) == _epoch(BlockShuffledSampler(sizes, 64, window=4), 5, 1)


def test_window_of_every_shard_is_one_shuffle_and_one_shard_windows_stay_in_shard() -> None:
    sizes = [7, 0, 5, 9]
    whole = BlockShuffledSampler(sizes, 3, window=4, drop_last=False)
    assert sorted(_epoch(whole, 1, 0)) == list(range(21))
    single = BlockShuffledSampler(sizes, 1, window=1)
    shards = shard_ids_of(_epoch(single, 1, 0), sizes).tolist()
    runs = [shards[0]] + [b for a, b in itertools.pairwise(shards) if a != b]
    assert sorted(runs) == [0, 2, 3]  # each shard read in one run


def test_resume_and_elastic_rank_slices_give_the_global_batches() -> None:
    sizes = [50, 70, 30, 90, 60, 40]
    sampler = BlockShuffledSampler(sizes, 24, window=2)
    seed, steps = 17, sampler.steps_per_epoch
    whole = [plan_batch(sampler, seed, g).indices.tolist() for g in range(3 * steps)]
    resumed = [plan_batch(sampler, seed, g).indices.tolist() for g in range(2 * steps, 3 * steps)]
    assert resumed == whole[2 * steps :]
    for world in (2, 4, 8):
        assert batch_sizes_of(RankSlice(sampler, 0, world)) == frozenset({24 // world})
        for g in (0, steps - 1, steps + 3):
            parts = [plan_batch(RankSlice(sampler, r, world), seed, g) for r in range(world)]
            assert [i for p in parts for i in p.indices.tolist()] == whole[g]
            assert parts[1].slots is not None
            assert parts[1].slots.tolist() == list(range(24 // world, 2 * 24 // world))
    with pytest.raises(ValueError, match="divisible by world_size = 5"):
        RankSlice(sampler, 0, 5)


def same_shard_neighbours(sampler: Any, sizes: list[int], seed: int, epochs: int) -> float:
    """Fraction of neighbouring slots of a batch whose samples come from the same shard."""
    same = total = 0
    for epoch in range(epochs):
        for step in range(sampler.steps_per_epoch):
            shards = shard_ids_of(sampler.indices(seed, epoch, step), sizes)
            same += int(np.count_nonzero(shards[1:] == shards[:-1]))
            total += int(shards.shape[0]) - 1
    return same / total


def shards_per_batch(sampler: Any, sizes: list[int], seed: int, epochs: int) -> float:
    """Mean number of distinct shards in a batch."""
    counts = [
        len(np.unique(shard_ids_of(sampler.indices(seed, epoch, step), sizes)))
        for epoch in range(epochs)
        for step in range(sampler.steps_per_epoch)
    ]
    return float(np.mean(counts))


def neighbour_shard_correlation(sampler: Any, sizes: list[int], seed: int) -> float:
    """Pearson correlation of the shard ids of neighbouring samples over one epoch."""
    shards = shard_ids_of(_epoch(sampler, seed, 0), sizes).astype(np.float64)
    return float(np.corrcoef(shards[:-1], shards[1:])[0, 1])


def test_shuffle_quality_against_the_global_shuffle() -> None:
    """The figures of the README: 64 shards of 64 items, batch 64, 4 epochs."""
    sizes = [64] * 64
    n, seed = sum(sizes), 3
    rows = {
        "global": ShuffledSampler(n, 64),
        "window 1": BlockShuffledSampler(sizes, 64, window=1),
        "window 4": BlockShuffledSampler(sizes, 64, window=4),
        "window 16": BlockShuffledSampler(sizes, 64, window=16),
    }
    same = {name: same_shard_neighbours(s, sizes, seed, 4) for name, s in rows.items()}
    per_batch = {name: shards_per_batch(s, sizes, seed, 4) for name, s in rows.items()}
    correlation = {name: neighbour_shard_correlation(s, sizes, seed) for name, s in rows.items()}
    print("same-shard neighbours", same)
    print("shards per batch", per_batch)
    print("neighbour shard-id correlation", correlation)
    assert same["window 1"] == 1.0
    assert per_batch["window 1"] == 1.0
    assert same["global"] == pytest.approx(1 / 64, abs=0.01)
    assert same["window 4"] == pytest.approx(1 / 4, abs=0.03)
    assert same["window 16"] == pytest.approx(1 / 16, abs=0.01)
    assert per_batch["window 4"] == 4.0
    assert per_batch["global"] > 30
    assert abs(correlation["global"]) < 0.05
    assert correlation["window 1"] > correlation["window 4"] > correlation["window 16"]


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (([], 2), {}, ValueError, "shard_sizes must name at least one shard but got none"),
        (([0, 0], 2), {}, ValueError, r"at least one item in total but got \[0, 0\]"),
        (([3, -1], 2), {}, ValueError, r"shard_sizes\[1\] must be an integer in \[0, 2\^63\)"),
        (("abc", 2), {}, TypeError, "shard_sizes must be a sequence of integers"),
        (([3], 0), {}, ValueError, "batch_size must be an integer in"),
        (([3], 2), {"window": 0}, ValueError, r"window must be an integer in \[1, 2\^63\)"),
        (([3], 2), {"drop_last": 1}, TypeError, "drop_last must be a bool but got int"),
    ],
)
def test_bad_arguments(args: Any, kwargs: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        BlockShuffledSampler(*args, **kwargs)


def test_bad_positions_and_repr() -> None:
    sampler = BlockShuffledSampler([3, 4], 3)
    assert repr(sampler) == "BlockShuffledSampler(2 shards, n=7, batch_size=3, window=4, " + (
        "drop_last=True)"
    )
    with pytest.raises(ValueError, match=r"step must be an integer in \[0, steps_per_epoch\)"):
        sampler.indices(0, 0, 2)
    with pytest.raises(ValueError, match="seed must be an integer"):
        sampler.indices(-1, 0, 0)
    empty = BlockShuffledSampler([1, 1], 3)
    assert empty.steps_per_epoch == 0
    assert empty.batch_sizes == frozenset()


def test_shard_pieces_cut_each_shard_into_consecutive_pieces() -> None:
    assert shard_pieces([5, 0, 3], 2) == [2, 2, 1, 0, 2, 1]
    assert shard_pieces([1024, 1024, 1024, 1000], 256) == [256] * 15 + [232]
    assert shard_pieces([7], 7) == [7]


def test_a_block_shuffle_over_pieces_reads_each_piece_within_its_block() -> None:
    """Pieces of large shards laid end to end are the shards' own indices: every item once
    an epoch, and a batch draws from at most two blocks of ``window`` pieces."""
    shards = [40, 40, 23]
    pieces = shard_pieces(shards, 8)
    sampler = BlockShuffledSampler(pieces, 8, window=2, drop_last=False)
    assert sorted(_epoch(sampler, 3, 0)) == list(range(sum(shards)))
    for step in range(sampler.steps_per_epoch):
        assert len(set(shard_ids_of(sampler.indices(3, 0, step), pieces).tolist())) <= 4


@pytest.mark.parametrize(
    ("sizes", "at_most", "message"),
    [
        ([4], 0, "at_most must be"),
        ([4], True, "at_most"),
        ([-1], 2, r"shard_sizes\[0\]"),
        ([[1]], 2, "shard_sizes"),
    ],
)
def test_shard_pieces_refuses_bad_input(sizes: Any, at_most: Any, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        shard_pieces(sizes, at_most)
