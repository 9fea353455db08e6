"""First-fit decreasing, pack_lengths, pack_sequences and padding_report."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioloader.core._packing import (
    first_fit_decreasing,
    pack_lengths,
    pack_sequences,
    padding_report,
)

WORKED = [5, 23, 9, 31, 14, 7, 18, 4, 27, 11, 16, 8]


def naive_ffd(lengths: list[int], capacity: int) -> list[int]:
    """The textbook loop: longest first (stable), first row with room, else a new row."""
    rows = [0] * len(lengths)
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda k: -lengths[k]):
        for r, free in enumerate(room):
            if free >= lengths[i]:
                room[r] -= lengths[i]
                rows[i] = r
                break
        else:
            room.append(capacity - lengths[i])
            rows[i] = len(room) - 1
    return rows


def test_worked_example_packs_into_six_rows() -> None:
    packing = pack_lengths(WORKED, 32)
    assert packing.row_lengths() == [[31], [27, 5], [23, 9], [18, 14], [16, 11, 4], [8, 7]]
    assert packing.rows() == [[3], [8, 0], [1, 2], [6, 4], [10, 9, 7], [11, 5]]
    assert (packing.num_rows, packing.total_slots, packing.real_tokens) == (6, 192, 173)


def test_worked_example_padding_report() -> None:
    arrival = padding_report(WORKED, 4)
    assert (arrival.real_tokens, arrival.total_slots, arrival.rows, arrival.batches) == (
        173,
        304,
        12,
        3,
    )
    assert round(arrival.efficiency * 100, 1) == 56.9
    bucketed = padding_report(WORKED, 4, "bucketed")
    assert (bucketed.total_slots, round(bucketed.efficiency * 100, 1)) == (220, 78.6)
    packed = padding_report(WORKED, 4, "packed", context_length=32)
    assert (packed.real_tokens, packed.total_slots, packed.rows, packed.batches) == (173, 192, 6, 2)
    assert round(packed.efficiency * 100, 1) == 90.1
    assert round(arrival.total_slots / packed.total_slots, 2) == 1.58
    pooled = padding_report(WORKED, 2, "bucketed", pool_batches=2)
    assert pooled.total_slots == 2 * (9 + 31 + 7 + 18 + 11 + 27)  # pools [5 9|23 31] [4 7|14 18] ..


def test_padding_report_errors_are_named() -> None:
    with pytest.raises(ValueError, match="context_length must be given for strategy='packed'"):
        padding_report(WORKED, 4, "packed")
    with pytest.raises(
        ValueError, match="strategy must be 'arrival', 'bucketed' or 'packed' but got 'x'"
    ):
        padding_report(WORKED, 4, "x")  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"batch_size must be an integer in \[1, 2\^63\) but got 0"
    ):
        padding_report(WORKED, 0)


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), max_size=60),
    capacity=st.integers(40, 64),
)
def test_ffd_equals_the_textbook_loop(lengths: list[int], capacity: int) -> None:
    rows = first_fit_decreasing(lengths, capacity).tolist()
    assert rows == naive_ffd(lengths, capacity)
    for r in set(rows):
        assert sum(n for n, row in zip(lengths, rows, strict=True) if row == r) <= capacity


def test_ffd_of_many_sequences_fills_rows_and_matches_the_loop_on_a_prefix() -> None:
    rng = np.random.default_rng(11)
    lengths = np.clip(rng.lognormal(5.5, 1.0, 100_000).astype(np.int64), 1, 2048)
    rows = first_fit_decreasing(lengths, 2048)
    load = np.bincount(rows, weights=lengths)
    assert load.max() <= 2048
    assert int(load.sum()) == int(lengths.sum())
    assert (np.unique(rows) == np.arange(rows.max() + 1)).all()  # no empty row
    assert first_fit_decreasing(lengths[:3000], 2048).tolist() == naive_ffd(
        lengths[:3000].tolist(), 2048
    )


@settings(max_examples=100, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 50), min_size=1, max_size=40),
    capacity=st.integers(1, 20),
    overflow=st.sampled_from(["split", "drop"]),
)
def test_every_token_is_placed_once_and_rows_never_overflow(
    lengths: list[int], capacity: int, overflow: str
) -> None:
    packing = pack_lengths(lengths, capacity, overflow)
    kept = [i for i, n in enumerate(lengths) if overflow == "split" or n <= capacity]
    assert packing.dropped.tolist() == [i for i in range(len(lengths)) if i not in kept]
    covered: dict[int, list[int]] = {i: [] for i in kept}
    for doc, start, n in zip(
        packing.documents.tolist(), packing.starts.tolist(), packing.lengths.tolist(), strict=True
    ):
        assert 0 <= n <= capacity
        covered[doc].extend(range(start, start + n))
    assert all(sorted(covered[i]) == list(range(lengths[i])) for i in kept)
    for r, sizes in enumerate(packing.row_lengths()):
        ptr = packing.row_ptr
        offsets = packing.offsets[ptr[r] : ptr[r + 1]].tolist()
        assert offsets == [sum(sizes[:k]) for k in range(len(sizes))]  # contiguous, in order
        assert sum(sizes) <= capacity
    if overflow == "split":
        assert packing.real_tokens == sum(lengths)


def test_split_and_drop_of_a_long_document() -> None:
    split = pack_lengths([10, 3, 25], 8)
    assert split.row_lengths() == [[8], [8], [8], [8], [3, 2, 1]]
    assert split.rows() == [[0], [2], [2], [2], [1, 0, 2]]
    assert split.starts.tolist() == [0, 0, 8, 16, 0, 8, 24]
    assert split.offsets.tolist() == [0, 0, 0, 0, 0, 3, 5]
    drop = pack_lengths([10, 3, 25, 8], 8, overflow="drop")
    assert drop.row_lengths() == [[8], [3]]
    assert (drop.rows(), drop.dropped.tolist()) == ([[3], [1]], [0, 2])
    with pytest.raises(ValueError, match="overflow must be 'split' or 'drop' but got 'cut'"):
        pack_lengths([1], 8, overflow="cut")
    with pytest.raises(ValueError, match="lengths must be <= capacity"):
        first_fit_decreasing([9], 8)
    with pytest.raises(ValueError, match="lengths must be >= 0 but got -1"):
        pack_lengths([-1], 8)


def test_pack_sequences_gives_tokens_positions_boundaries_and_mask() -> None:
    packed = pack_sequences([[1, 2], [3, 4, 5], [6]], 4, causal_mask=True, padding_value=-1)
    assert packed.rows == [[1, 2], [0]]
    assert packed.row_lengths == [[3, 1], [2]]
    assert packed.tokens is not None
    assert packed.tokens.tolist() == [[3, 4, 5, 6], [1, 2, -1, -1]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 0], [0, 1, 0, 0]]
    assert [c.tolist() for c in packed.cu_seqlens] == [[0, 3, 4], [0, 2]]
    assert all(c.dtype == np.int32 for c in packed.cu_seqlens)
    assert packed.causal_mask is not None
    assert packed.causal_mask.astype(int).tolist() == [
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 1]],
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]],
    ]
    bare = pack_sequences(np.array([2, 3, 1]), 4)
    assert (bare.tokens, bare.causal_mask, bare.rows) == (None, None, [[1, 2], [0]])
    multi = pack_sequences([np.ones((2, 2)), np.zeros((1, 2))], 3)
    assert multi.tokens is not None
    assert multi.tokens.shape == (1, 3, 2)
