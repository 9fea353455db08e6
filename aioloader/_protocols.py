"""The small protocols that connect datasets, collators and the engine.

Sources implement ``Dataset`` (or ``BatchedDataset``); collators implement ``Collator``.
Neither needs to know anything about the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar, runtime_checkable

from .core import BatchPlan

SampleT = TypeVar("SampleT")
SampleT_co = TypeVar("SampleT_co", covariant=True)
SampleT_contra = TypeVar("SampleT_contra", contravariant=True)
BatchT_co = TypeVar("BatchT_co", covariant=True)


@runtime_checkable
class Dataset(Protocol[SampleT_co]):
    """An indexable source of samples read asynchronously.

    ``get_sample`` must be safe to call concurrently and return the same sample for the
    same index. The engine also reads a dataset that has a plain (synchronous)
    ``get_sample``, in threads.
    """

    def __len__(self) -> int: ...

    async def get_sample(self, index: int, /) -> SampleT_co: ...


@runtime_checkable
class BatchedDataset(Dataset[SampleT_co], Protocol[SampleT_co]):
    """A dataset that can read many samples in one call (one batch's objects at once)."""

    async def get_samples(self, indices: Sequence[int], /) -> Sequence[SampleT_co]: ...


@runtime_checkable
class SyncDataset(Protocol[SampleT_co]):
    """A plain synchronous dataset; the engine runs its reads in threads."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> SampleT_co: ...


class Collator(Protocol[SampleT_contra, BatchT_co]):
    """Turns the samples of one step into a batch: a pure, synchronous function.

    ``plan`` gives the global step, the epoch, the step in the epoch and the dataset
    indices; ``plan.augment_keys()`` gives the per-slot keys of stream 1.
    """

    def __call__(self, samples: Sequence[SampleT_contra], plan: BatchPlan, /) -> BatchT_co: ...
