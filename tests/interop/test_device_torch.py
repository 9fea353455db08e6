"""aioloader.interop.torch.to_device_stream: the torch device path, run on the CPU.

``device="cpu"`` runs TorchDevice's code without pinning, streams or events; the CUDA
calls are checked on a GPU machine. The rules themselves are pinned on FakeDevice
(tests/interop/test_device.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from aioloader.core import BufferPool, digest_batch
from aioloader.interop.torch import TensorBatch, to_device_stream
from tests.interop.helpers import expected_tokens, host_fields, pad_loader, pooled_batches

FIELDS = 4


def _numpy(batch: TensorBatch) -> dict[str, Any]:
    return {
        name: value.numpy() if isinstance(value, torch.Tensor) else value
        for name, value in vars(batch).items()
    }


def _reference(loader: Any, stop: int) -> list[str]:
    out = []
    for batch in loader.iter_sync(0, stop):
        with batch:
            out.append(digest_batch(host_fields(batch)))
    return out


def test_the_device_batches_are_the_cpu_batches() -> None:
    loader = pad_loader()
    reference = _reference(loader, 12)
    stream = to_device_stream(loader.iter_sync(0, 12), "cpu")
    batches = list(stream)
    assert all(type(b) is TensorBatch for b in batches)
    assert all(b.tokens.device == torch.device("cpu") for b in batches)
    assert [digest_batch(_numpy(b)) for b in batches] == reference
    stats = stream.statistics()
    assert (stats.batches, stats.copies, stats.direct_copies) == (12, 12 * FIELDS, 0)
    assert stats.staging_allocations == 2 * FIELDS  # depth 2, fixed shapes
    assert stats.staging_reuses == 10 * FIELDS


@pytest.mark.anyio
async def test_async_for_gives_the_cpu_batches() -> None:
    loader = pad_loader()
    reference = _reference(loader, 12)
    digests = [digest_batch(_numpy(b)) async for b in to_device_stream(loader, "cpu")]
    assert digests[:12] == reference
    assert len(digests) == 12  # one epoch of 48 samples in batches of 4


def test_process_workers_batches_are_read_in_place() -> None:
    loader = pad_loader(executor="process", workers=2, prefetch=4)
    reference = _reference(loader, 12)
    with to_device_stream(loader.iter_sync(0, 12), torch.device("cpu"), depth=3) as stream:
        digests = [digest_batch(_numpy(b)) for b in stream]
        stats = stream.statistics()
        assert stats.direct_copies == stats.copies == 12 * FIELDS
        assert stats.staging_allocations == 0
        assert stats.registrations >= 1
    assert stream.statistics().registrations == 0
    assert digests == reference


def test_a_kept_tensor_is_never_overwritten_by_100_later_batches() -> None:
    pool = BufferPool()
    batches = iter(to_device_stream(pooled_batches(pool, 101), "cpu"))
    kept = next(batches).tokens
    part = kept[1:3]  # a view of it
    count = 0
    for batch in batches:
        assert batch.tokens.data_ptr() != kept.data_ptr()
        count += 1
    assert count == 100
    assert np.array_equal(kept.numpy(), expected_tokens(0))
    assert np.array_equal(part.numpy(), expected_tokens(0)[1:3])
    assert pool.statistics().misses == 3  # host buffers were reused all along


def test_tensors_already_in_the_batch_are_copied() -> None:
    source = torch.arange(4)
    (out,) = list(to_device_stream([{"t": source, "n": np.int16(3)}], "cpu"))
    assert torch.equal(out["t"], source)
    assert out["t"].data_ptr() != source.data_ptr()
    assert out["n"].dtype == torch.int16
    assert out["n"].item() == 3


def test_without_cuda_the_error_names_device_the_rule_and_the_value() -> None:
    with pytest.raises(
        RuntimeError,
        match=r"^device must be an available CUDA device but got 'cuda:1' and "
        r"torch\.cuda\.is_available\(\) is False",
    ):
        to_device_stream([], "cuda:1")
    with pytest.raises(
        ValueError, match=r"^device must be a CUDA device \('cuda', 'cuda:N'\) or 'cpu' but got"
    ):
        to_device_stream([], "meta")
    with pytest.raises(ValueError, match=r"^device must name a torch device but got 'gpu'"):
        to_device_stream([], "gpu")
    with pytest.raises(
        TypeError, match=r"^device must be a torch.device, a str or an int but got float \(1\.5\)$"
    ):
        to_device_stream([], 1.5)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=r"^device must be a torch.device, a str or an int but got bool \(False\)$"
    ):
        to_device_stream([], False)
    with pytest.raises(ValueError, match=r"^depth must be an integer >= 1 but got 0$"):
        to_device_stream([], "cpu", depth=0)


def test_a_dtype_torch_lacks_is_named() -> None:
    with pytest.raises(TypeError, match=r"dtype torch supports to go to a device but got <U1"):
        list(to_device_stream(_one({"s": np.array(["a"])}), "cpu"))


def _one(batch: Any) -> Iterator[Any]:
    yield batch
