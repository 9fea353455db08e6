"""aioloader.interop.jax.to_device_stream on CPU jax: the same arrays as the CPU batches."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from aioloader.core import BufferPool, digest_batch
from tests.interop.helpers import expected_tokens, host_fields, pad_loader, pooled_batches

jax = pytest.importorskip("jax")
from aioloader.interop.jax import to_device_stream  # noqa: E402


def _numpy(batch: dict[str, Any]) -> dict[str, Any]:
    return {
        name: np.asarray(value) if isinstance(value, jax.Array) else value
        for name, value in batch.items()
    }


def _as_jax_keeps(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields with the dtypes jax gives them (int64 is int32 unless x64 is on)."""
    return {
        name: value.astype(jax.dtypes.canonicalize_dtype(value.dtype))
        if isinstance(value, np.ndarray)
        else value
        for name, value in fields.items()
    }


def _reference(loader: Any, stop: int) -> list[str]:
    out = []
    for batch in loader.iter_sync(0, stop):
        with batch:
            out.append(digest_batch(_as_jax_keeps(host_fields(batch))))
    return out


def test_the_device_arrays_are_the_cpu_batches() -> None:
    loader = pad_loader()
    reference = _reference(loader, 12)
    stream = to_device_stream(loader.iter_sync(0, 12), jax.devices()[0])
    batches = list(stream)
    assert all(isinstance(b["tokens"], jax.Array) for b in batches)
    assert [digest_batch(_numpy(b)) for b in batches] == reference
    stats = stream.statistics()
    assert (stats.batches, stats.copies, stats.registrations) == (12, 12 * 4, 0)


@pytest.mark.anyio
async def test_async_for_gives_the_cpu_batches() -> None:
    loader = pad_loader()
    reference = _reference(loader, 12)
    digests = [digest_batch(_numpy(b)) async for b in to_device_stream(loader.stream(0, 12))]
    assert digests == reference


def test_kept_arrays_survive_100_later_batches_and_staging_stays_bounded() -> None:
    pool = BufferPool()
    stream = to_device_stream(pooled_batches(pool, 101))
    batches = iter(stream)
    kept = next(batches)
    for _ in batches:
        pass
    assert np.array_equal(np.asarray(kept["tokens"]), expected_tokens(0))
    stats = stream.statistics()
    # a staging buffer is reused unless CPU jax kept it as an array's own memory
    assert stats.staging_allocations + stats.staging_reuses == 101 * 4
    assert stats.staging_held <= 2 * 2 * 4


def test_a_bad_device_is_named() -> None:
    with pytest.raises(TypeError, match=r"^device must be a jax.Device, a jax.sharding.Sharding"):
        to_device_stream([], "cpu")
