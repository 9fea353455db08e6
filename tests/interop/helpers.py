"""Containers that every interop conversion must keep (the torch and jax tests share them)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from aioloader.core import BatchPlan, PadCollator, ShuffledSampler
from aioloader.engine import DataLoader
from aioloader.testing import MemoryDataset


class Pair(NamedTuple):
    """A named tuple: converted field by field, rebuilt as a ``Pair``."""

    left: Any
    right: Any


@dataclass
class Inner:
    """A dataclass: its fields are converted and it is rebuilt as an ``Inner``."""

    values: Any
    name: str


# -- pooled batches of fixed shapes, for the device feed and kept-tensor tests -----------


def pooled_batches(pool: Any, count: int, rows: int = 4, width: int = 5) -> Iterator[Any]:
    """``count`` ``PaddedBatch`` es from ``pool`` (same shapes), batch ``g`` holding
    ``g * 100 + row`` in row ``row``: later batches reuse the buffers of released ones."""
    collator = PadCollator(pool=pool)
    for g in range(count):
        samples = [np.full(width, g * 100 + r, np.float32) for r in range(rows)]
        plan = BatchPlan(0, g, 0, g, np.arange(rows, dtype=np.int64) + g)
        yield collator(samples, plan)


def expected_tokens(g: int, rows: int = 4, width: int = 5) -> Any:
    """The ``tokens`` of batch ``g`` of ``pooled_batches``."""
    return np.repeat(np.arange(rows, dtype=np.float32)[:, None] + g * 100, width, axis=1)


def pad_loader(n: int = 48, batch: int = 4, **options: Any) -> DataLoader[Any, Any]:
    """A DataLoader of fixed-length float32 sequences through ``PadCollator``."""
    samples = [np.arange(18, dtype=np.float32).reshape(6, 3) + 1000 * i for i in range(n)]
    return DataLoader(
        MemoryDataset(samples), ShuffledSampler(n, batch), PadCollator(), seed=5, **options
    )


def host_fields(batch: Any) -> dict[str, Any]:
    """A pooled batch's fields, arrays copied (valid after release)."""
    return {
        name: np.array(value, copy=True) if isinstance(value, np.ndarray) else value
        for name, value in batch.__batch_fields__()
    }
