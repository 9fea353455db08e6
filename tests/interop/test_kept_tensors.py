"""Tensors and arrays handed out by to_torch, to_device and to_jax stay valid after release.

A tensor from ``to_torch`` shares the batch's pooled memory; the buffers go back to the
pool only once every tensor sharing them is garbage-collected, so later batches never
overwrite a tensor the user keeps (autograd keeps CPU inputs for backward).
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
import torch

from aioloader.core import BufferPool
from aioloader.interop.torch import to_device, to_torch
from tests.interop.helpers import expected_tokens, host_fields, pad_loader, pooled_batches


def test_a_tensor_from_to_torch_survives_100_later_batches() -> None:
    pool = BufferPool()
    batches = pooled_batches(pool, 101)
    first = next(batches)
    with first:
        tensors = to_torch(first)
        kept, mask = tensors.tokens, tensors.attention_mask[1:]  # a whole field and a view
        assert kept.data_ptr() == first.tokens.ctypes.data  # still shared, no copy
    del tensors
    for batch in batches:
        with batch:
            to_torch(batch)  # dropped at once: its buffers come back at release
    assert np.array_equal(kept.numpy(), expected_tokens(0))
    assert mask.numpy().tolist() == [[True] * 5] * 3
    # the first batch's 3 buffers stayed out; the other 100 batches shared 3 others
    assert pool.statistics().misses == 6
    assert pool.statistics().buffers_held == 3
    del kept
    assert pool.statistics().buffers_held == 3  # the view still holds the buffers
    del mask
    gc.collect()
    assert pool.statistics().buffers_held == 6  # back once the last tensor is gone


def test_a_tensor_kept_from_a_loader_is_never_overwritten() -> None:
    loader = pad_loader(n=404)
    expected: dict[str, Any] = {}
    kept: Any = None
    for batch in loader.iter_sync(0, 101):
        with batch:
            tensors = to_torch(batch)
            if kept is None:
                kept, expected = tensors, host_fields(batch)
    for name, value in expected.items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(getattr(kept, name).numpy(), value), name


def test_a_tensor_from_a_process_workers_batch_is_never_overwritten() -> None:
    loader = pad_loader(n=404, executor="process", workers=2, prefetch=4)
    kept: Any = None
    expected: Any = None
    for batch in loader.iter_sync(0, 101):
        with batch:
            tokens = to_torch(batch).tokens
            if kept is None:
                kept, expected = tokens, batch.tokens.copy()
    assert np.array_equal(kept.numpy(), expected)


def test_to_device_on_the_cpu_keeps_its_tensors_valid() -> None:
    pool = BufferPool()
    batches = pooled_batches(pool, 101)
    with next(batches) as first:
        kept = to_device(first, "cpu").tokens
    for batch in batches:
        with batch:
            to_device(batch, "cpu")
    assert np.array_equal(kept.numpy(), expected_tokens(0))


@pytest.mark.parametrize("count", [1, 3])
def test_a_batch_not_released_keeps_its_buffers_until_collected(count: int) -> None:
    pool = BufferPool()
    batch = next(pooled_batches(pool, 1))
    tensors = [to_torch(batch).tokens for _ in range(count)]
    del batch
    gc.collect()
    assert all(np.array_equal(t.numpy(), expected_tokens(0)) for t in tensors)
    assert pool.statistics().buffers_held == 0  # never released: never back


def test_arrays_from_to_jax_survive_100_later_batches() -> None:
    jax_interop = pytest.importorskip("aioloader.interop.jax")
    pool = BufferPool()
    batches = pooled_batches(pool, 101)
    with next(batches) as first:
        kept = jax_interop.to_jax(first)
    for batch in batches:
        with batch:
            jax_interop.to_jax(batch)
    assert np.array_equal(np.asarray(kept["tokens"]), expected_tokens(0))
    assert np.asarray(kept["lengths"]).tolist() == [5, 5, 5, 5]


def test_torch_storage_keeps_the_exported_view_alive() -> None:
    """The mechanism: torch.from_numpy holds its array as long as any tensor shares it."""
    pool = BufferPool()
    with next(pooled_batches(pool, 1)) as batch:
        part = to_torch(batch).tokens[2]
    gc.collect()
    assert pool.statistics().buffers_held == 0
    assert torch.equal(part, torch.full((5,), 2.0))
    del part
    gc.collect()
    assert pool.statistics().buffers_held == 3
