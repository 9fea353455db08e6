"""pad_sequences and PadCollator against torch pad_sequence."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.utils.rnn import pad_sequence

from aioloader._errors import BufferReleasedError
from aioloader.core._plan import BatchPlan
from aioloader.core._pool import BufferPool
from aioloader.core._sequences import PadCollator, pad_sequences


def plan_of(
    indices: Any, global_step: int = 0, seed: int = 0, epoch: int = 0, step: int = 0
) -> BatchPlan:
    return BatchPlan(seed, global_step, epoch, step, np.asarray(indices, dtype=np.int64))


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 9), min_size=1, max_size=6),
    trailing=st.sampled_from([(), (2,), (2, 3)]),
    side=st.sampled_from(["right", "left"]),
    value=st.sampled_from([0, -1, 7]),
    dtype=st.sampled_from([np.int64, np.float32, np.int32]),
    seed=st.integers(0, 1000),
)
def test_pad_sequences_equals_torch_pad_sequence(
    lengths: list[int], trailing: tuple[int, ...], side: str, value: int, dtype: Any, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    seqs = [(rng.standard_normal((n, *trailing)) * 50).astype(dtype) for n in lengths]
    expected = pad_sequence(
        [torch.from_numpy(s) for s in seqs],
        batch_first=True,
        padding_value=value,
        padding_side=side,
    ).numpy()
    actual = pad_sequences(seqs, padding_value=value, padding_side=side)
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert actual.tobytes() == expected.tobytes()
    collator = PadCollator(padding_value=value, padding_side=side)
    with collator(seqs, plan_of(range(len(seqs)), global_step=4)) as batch:
        assert batch.tokens.tobytes() == expected.tobytes()
        assert batch.lengths.tolist() == lengths
        width = expected.shape[1]
        for i, n in enumerate(lengths):
            real = (
                [t < n for t in range(width)]
                if side == "right"
                else [t >= width - n for t in range(width)]
            )
            assert batch.attention_mask[i].tolist() == real
        assert batch.global_step == 4


def test_pad_collator_hand_worked_left_and_right() -> None:
    seqs = [[1, 2, 3], [4], [5, 6]]
    pool = BufferPool()
    right = PadCollator(padding_value=-1, pool=pool)(seqs, plan_of([7, 8, 9], 3, epoch=1, step=2))
    assert right.tokens.tolist() == [[1, 2, 3], [4, -1, -1], [5, 6, -1]]
    assert right.attention_mask.tolist() == [[True] * 3, [True, False, False], [True, True, False]]
    assert (right.lengths.dtype, right.lengths.tolist()) == (np.int64, [3, 1, 2])
    assert (right.indices.tolist(), right.global_step, right.epoch, right.step) == (
        [7, 8, 9],
        3,
        1,
        2,
    )
    left = PadCollator(padding_side="left")(seqs, plan_of([0, 1, 2]))
    assert left.tokens.tolist() == [[1, 2, 3], [0, 0, 4], [0, 5, 6]]
    assert left.attention_mask.tolist() == [[True] * 3, [False, False, True], [False, True, True]]
    right.release()
    with pytest.raises(BufferReleasedError):
        _ = right.tokens
    assert pool.statistics().buffers_out == 0


def test_pad_errors_are_named() -> None:
    with pytest.raises(ValueError, match="padding_side must be 'left' or 'right' but got 'up'"):
        pad_sequences([[1]], padding_side="up")
    with pytest.raises(ValueError, match="seqs must hold at least one sequence but got none"):
        pad_sequences([])
    with pytest.raises(
        ValueError,
        match=r"seqs\[1\] must have shape \[L, \*\[2\]\] like seqs\[0\] but got \[1, 3\]",
    ):
        pad_sequences([np.zeros((1, 2)), np.zeros((1, 3))])
    with pytest.raises(ValueError, match=r"seqs\[0\] must have shape \[L, \*\[\]\]"):
        pad_sequences([np.int64(3)])
    with pytest.raises(ValueError, match=r"plan.indices must hold one index per sample \(1\)"):
        PadCollator()([[1]], plan_of([1, 2]))


def test_a_sequence_that_does_not_fit_the_first_ones_dtype_is_named() -> None:
    with pytest.raises(ValueError, match=r"^seqs\[1\] must fit the dtype int64 of the first"):
        pad_sequences([[0], [0, 2**63]])  # the second is float64: 2**63 overflows int64
