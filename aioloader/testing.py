"""Test doubles for your own tests of code that uses a loader.

- ``MemoryDataset(samples)``: samples held in a list, read at once (the engine's cost alone;
  defined in ``aioloader.datasets``, with the built-in datasets it holds).
- ``SlowDataset(inner, max_delay, seed)``: each read waits a reproducible pseudo-random
  time, so reads complete out of order; counts reads and the peak number in flight.
- ``FailingDataset(inner, fail_at, error_type)``: reading an index in ``fail_at`` raises.
- ``StackCollator()``: stacks array samples into an ``ArrayBatch``.
- ``check_dataset(dataset)`` / ``await check_dataset_async(dataset)``: checks that a
  dataset follows the protocol and returns the same sample for the same index.

They use anyio only, so they work on asyncio, uvloop and trio, under anyio's pytest plugin
or pytest-asyncio, in fixtures of any scope.

>>> import anyio
>>> anyio.run(MemoryDataset([10, 20, 30]).get_sample, 1)
20
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio
import numpy as np
import numpy.typing as npt

from .core import BatchPlan, mix, takes_plan
from .datasets import MemoryDataset as MemoryDataset

__all__ = (
    "ArrayBatch",
    "FailingDataset",
    "MemoryDataset",
    "SlowDataset",
    "StackCollator",
    "check_dataset",
    "check_dataset_async",
)

SampleT = TypeVar("SampleT")


class SlowDataset(Generic[SampleT]):
    """Wraps a dataset; each read sleeps a pseudo-random time of up to ``max_delay`` seconds.

    The delay of an index is fixed by ``(seed, index)``, so completion order is scrambled
    but reproducible.
    """

    def __init__(self, inner: Any, max_delay: float = 0.002, seed: int = 0) -> None:
        self._inner = inner
        self._max_delay = max_delay
        self._seed = seed
        self.reads = 0
        self.in_flight = 0
        self.peak_in_flight = 0

    def __len__(self) -> int:
        return len(self._inner)

    async def get_sample(self, index: int) -> Any:
        """The inner sample, after a delay."""
        self.reads += 1
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            fraction = (mix((self._seed * 1_000_003 + index) % 2**64) >> 11) * 2.0**-53
            await anyio.sleep(fraction * self._max_delay)
            return await self._inner.get_sample(index)
        finally:
            self.in_flight -= 1


class FailingDataset(Generic[SampleT]):
    """Wraps a dataset; reading any index in ``fail_at`` raises ``error_type``."""

    def __init__(
        self, inner: Any, fail_at: set[int], error_type: type[Exception] = OSError
    ) -> None:
        self._inner = inner
        self._fail_at = set(fail_at)
        self._error_type = error_type

    def __len__(self) -> int:
        return len(self._inner)

    async def get_sample(self, index: int) -> Any:
        """The inner sample, or the configured error."""
        if index in self._fail_at:
            raise self._error_type(f"injected failure reading index {index}")
        return await self._inner.get_sample(index)


@dataclass(frozen=True)
class ArrayBatch:
    """What ``StackCollator`` builds: stacked samples plus where they came from."""

    global_step: int
    indices: npt.NDArray[np.int64]
    data: npt.NDArray[Any]

    def release(self) -> None:
        """Nothing to return: the arrays are the batch's own (kept for a uniform API)."""

    def __enter__(self) -> ArrayBatch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


@takes_plan
class StackCollator:
    """Stacks array samples with ``np.stack``; the simplest real collator."""

    def __call__(self, samples: Sequence[Any], plan: BatchPlan) -> ArrayBatch:
        """``ArrayBatch(plan.global_step, plan.indices, np.stack(samples))``."""
        return ArrayBatch(plan.global_step, plan.indices.copy(), np.stack(samples))


def check_dataset(dataset: Any, indices: Sequence[int] | None = None) -> None:
    """Check that ``dataset`` follows the protocol and is deterministic; raise if not.

    Reads each index twice (by default the first ten) and compares the results. Runs its
    own event loop; from async code, ``await check_dataset_async(dataset)``.
    """
    anyio.run(check_dataset_async, dataset, indices)


async def check_dataset_async(dataset: Any, indices: Sequence[int] | None = None) -> None:
    """``check_dataset`` for code already running on an event loop (an async test)."""
    if not hasattr(dataset, "__len__"):
        raise TypeError(f"dataset must define __len__ but {type(dataset).__name__} does not")
    getter: Callable[[int], Any] | None = getattr(dataset, "get_sample", None)
    if getter is None or not inspect.iscoroutinefunction(getter):
        raise TypeError(
            f"dataset must define async get_sample(index) but {type(dataset).__name__} does not"
        )
    chosen = list(range(min(10, len(dataset)))) if indices is None else list(indices)
    for index in chosen:
        first = await dataset.get_sample(index)
        second = await dataset.get_sample(index)
        if not _same(first, second):
            raise ValueError(f"dataset returned different samples for index {index}")
    if inspect.iscoroutinefunction(getattr(dataset, "get_samples", None)):
        batch = await dataset.get_samples(chosen)
        for index, sample in zip(chosen, batch, strict=True):
            if not _same(sample, await dataset.get_sample(index)):
                raise ValueError(f"get_samples and get_sample disagree at index {index}")


def _same(first: Any, second: Any) -> bool:
    from .core import digest_batch

    return digest_batch(first) == digest_batch(second)
