"""PackedSampler and PackCollator."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from aioloader.core._packed import PackCollator, PackedSampler
from aioloader.core._plan import BatchPlan, plan_batch
from aioloader.core._pool import BufferPool


def plan_of(
    indices: Any, global_step: int = 0, seed: int = 0, epoch: int = 0, step: int = 0
) -> BatchPlan:
    return BatchPlan(seed, global_step, epoch, step, np.asarray(indices, dtype=np.int64))


def test_packed_sampler_is_a_pure_function_serving_every_document_once() -> None:
    lengths = np.random.default_rng(5).integers(1, 60, 500)
    sampler = PackedSampler(lengths, 64, rows_per_batch=4)
    other = PackedSampler(lengths, 64, rows_per_batch=4)
    steps = sampler.steps_per_epoch
    assert steps == -(-sampler.num_rows // 4)
    for epoch in (0, 1):
        served = np.concatenate([sampler.indices(9, epoch, s) for s in range(steps)])
        assert sorted(served.tolist()) == list(range(500))
        assert all(
            np.array_equal(sampler.indices(9, epoch, s), other.indices(9, epoch, s))
            for s in (0, steps - 1)
        )
    assert not np.array_equal(
        np.concatenate([sampler.indices(9, 0, s) for s in range(steps)]),
        np.concatenate([sampler.indices(9, 1, s) for s in range(steps)]),
    )
    assert not np.array_equal(sampler.indices(9, 0, 0), sampler.indices(10, 0, 0))
    layout = sampler.layout(9, 0, 0)
    assert layout.num_rows == 4
    assert layout.documents.tolist() == sampler.indices(9, 0, 0).tolist()
    assert all(sum(lengths[r]) <= 64 for r in layout.rows())
    with pytest.raises(ValueError, match="step must be an integer in"):
        sampler.indices(0, 0, steps)


def test_packed_sampler_splits_long_documents_and_drops_on_request() -> None:
    lengths = [100, 3, 40, 70]
    split = PackedSampler(lengths, 32, rows_per_batch=2)
    tokens: dict[int, list[int]] = {i: [] for i in range(4)}
    for s in range(split.steps_per_epoch):
        layout = split.layout(1, 0, s)
        for d, a, n in zip(
            layout.documents.tolist(), layout.starts.tolist(), layout.lengths.tolist(), strict=True
        ):
            tokens[d].extend(range(a, a + n))
    assert {d: sorted(t) for d, t in tokens.items()} == {
        d: list(range(n)) for d, n in enumerate(lengths)
    }
    drop = PackedSampler(lengths, 32, rows_per_batch=2, overflow="drop", drop_last=True)
    assert (drop.num_rows, drop.steps_per_epoch) == (1, 0)


def test_pack_collator_builds_rows_from_the_sampler_layout() -> None:
    rng = np.random.default_rng(8)
    lengths = rng.integers(1, 20, 40)
    docs = [np.arange(n) + 1000 * i for i, n in enumerate(lengths)]
    sampler = PackedSampler(lengths, 24, rows_per_batch=3)
    pool = BufferPool()
    collator = PackCollator(24, sampler=sampler, padding_value=-1, causal_mask=True, pool=pool)
    plan = plan_batch(sampler, 3, 1)
    samples = [docs[i] for i in plan.indices.tolist()]
    batch = collator(samples, plan)
    layout = sampler.layout(3, plan.epoch, plan.step)
    expected = layout.gather(docs, padding_value=-1)
    assert batch.tokens.tolist() == expected.tolist()
    assert batch.position_ids.tolist() == layout.position_ids().tolist()
    assert batch.segment_ids.tolist() == layout.segment_ids().tolist()
    assert batch.causal_mask is not None
    assert batch.causal_mask.tolist() == layout.causal_mask().tolist()
    ends = [
        r * 24 + o + n
        for r, row in enumerate(layout.row_lengths())
        for o, n in zip(np.cumsum([0, *row[:-1]]), row, strict=True)
    ]
    assert set(ends) <= set(batch.cu_seqlens.tolist())
    assert (batch.cu_seqlens[0], batch.cu_seqlens[-1]) == (0, 3 * 24)
    assert batch.indices.tolist() == plan.indices.tolist()
    batch.release()
    assert pool.statistics().buffers_out == 0
    with pytest.raises(ValueError, match=r"plan\.indices must be the sampler's pieces"):
        collator(samples, plan_of(plan.indices[::-1], seed=3, epoch=plan.epoch, step=plan.step))
    with pytest.raises(
        ValueError, match=r"context_length must equal sampler.context_length \(24\) but got 8"
    ):
        PackCollator(8, sampler=sampler)


def test_pack_collator_without_a_sampler_packs_the_step() -> None:
    collator = PackCollator(4)
    batch = collator([[1, 2], [3, 4, 5], [6]], plan_of([10, 11, 12], global_step=5))
    assert batch.tokens.tolist() == [[3, 4, 5, 6], [1, 2, 0, 0]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 0], [0, 1, 0, 0]]
    assert batch.segment_ids.tolist() == [[1, 1, 1, 2], [0, 0, -1, -1]]
    assert batch.cu_seqlens.tolist() == [0, 3, 4, 6, 8]
    assert (batch.causal_mask, batch.global_step) == (None, 5)
