"""Subset and ConcatDataset: the exact samples, the kind the loader reads, one batched call
per dataset under them, and errors that name the argument."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from aioloader import ConcatDataset, DataLoader, SequentialSampler, Subset
from aioloader.sources._decode import mark_sample_error

pytestmark = pytest.mark.anyio


class Batched:
    """Async reads, one ``get_samples`` call per batch (counted)."""

    def __init__(self, samples: Sequence[Any]) -> None:
        self.samples = list(samples)
        self.batch_calls: list[list[int]] = []
        self.single_calls: list[int] = []

    def __len__(self) -> int:
        return len(self.samples)

    async def get_sample(self, index: int) -> Any:
        self.single_calls.append(index)
        return self.samples[index]

    async def get_samples(self, indices: Sequence[int]) -> list[Any]:
        self.batch_calls.append(list(indices))
        return [self.samples[i] for i in indices]


class AsyncOnly:
    """Async ``get_sample`` only (counted)."""

    def __init__(self, samples: Sequence[Any]) -> None:
        self.samples = list(samples)
        self.calls: list[int] = []

    def __len__(self) -> int:
        return len(self.samples)

    async def get_sample(self, index: int) -> Any:
        self.calls.append(index)
        return self.samples[index]


class SyncItems:
    """A torch-style map dataset: ``__getitem__`` and ``__len__`` (not in memory)."""

    def __init__(self, samples: Sequence[Any]) -> None:
        self.samples = list(samples)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Any:
        return self.samples[index]


def _kind(dataset: Any) -> tuple[bool, bool, bool]:
    """(async get_sample, async get_samples, sync __getitem__) of a view."""
    return (
        hasattr(dataset, "get_sample"),
        hasattr(dataset, "get_samples"),
        hasattr(dataset, "__getitem__"),
    )


async def test_a_subset_reads_the_datasets_samples_at_its_indices() -> None:
    inner = Batched([f"s{i}" for i in range(10)])
    subset: Any = Subset(inner, [7, 2, 2, 9])
    assert isinstance(Subset(inner, [0]), Subset)
    assert _kind(subset) == (True, True, False)
    assert len(subset) == 4
    assert subset.indices.tolist() == [7, 2, 2, 9]
    assert [await subset.get_sample(i) for i in range(4)] == ["s7", "s2", "s2", "s9"]
    assert inner.single_calls == [7, 2, 2, 9]
    assert await subset.get_samples([3, 0, 1]) == ["s9", "s7", "s2"]
    assert inner.batch_calls == [[9, 7, 2]]  # one call, mapped indices


async def test_a_subset_of_an_async_dataset_has_no_batched_read() -> None:
    inner = AsyncOnly(list(range(100, 110)))
    subset: Any = Subset(inner, range(9, -1, -3))
    assert _kind(subset) == (True, False, False)
    assert [await subset.get_sample(i) for i in range(len(subset))] == [109, 106, 103, 100]


def test_a_subset_of_a_sync_dataset_is_sync_and_keeps_in_memory() -> None:
    array_subset: Any = Subset(np.arange(10) * 10, np.array([4, 1]))
    assert _kind(array_subset) == (False, False, True)
    assert (array_subset.in_memory, int(array_subset[0]), int(array_subset[1])) == (True, 40, 10)
    items: Any = Subset(SyncItems("abcdef"), [5, 0])
    assert (items.in_memory, items[0], items[1]) == (False, "f", "a")
    again = pickle.loads(pickle.dumps(items))  # worker processes get sync datasets pickled
    assert (type(again), again[0], again.indices.tolist()) == (type(items), "f", [5, 0])


async def test_a_concat_reads_each_index_from_the_dataset_that_holds_it() -> None:
    first, second = Batched(["a0", "a1", "a2"]), AsyncOnly(["b0", "b1"])
    third = SyncItems(["c0"])
    both: Any = ConcatDataset([first, AsyncOnly([]), second, third])
    assert _kind(both) == (True, True, False)
    assert (len(both), both.cumulative_sizes) == (6, [3, 3, 5, 6])
    assert [await both.get_sample(i) for i in range(6)] == ["a0", "a1", "a2", "b0", "b1", "c0"]
    first.batch_calls.clear()
    second.calls.clear()
    got = await both.get_samples([5, 3, 0, 4, 2, 0])
    assert got == ["c0", "b0", "a0", "b1", "a2", "a0"]
    assert first.batch_calls == [[0, 2, 0]]  # one call for the batched dataset
    assert sorted(second.calls) == [0, 1]  # its reads, each once (concurrent: any order)


async def test_a_concat_of_async_datasets_without_get_samples_has_none() -> None:
    both: Any = ConcatDataset([AsyncOnly([1, 2]), SyncItems([3])])
    assert _kind(both) == (True, False, False)
    assert [await both.get_sample(i) for i in range(3)] == [1, 2, 3]


def test_a_concat_of_sync_datasets_is_sync() -> None:
    memory: Any = ConcatDataset([[0, 1], (2,), np.array([3, 4])])
    assert _kind(memory) == (False, False, True)
    assert (memory.in_memory, [int(memory[i]) for i in range(5)]) == (True, [0, 1, 2, 3, 4])
    mixed: Any = ConcatDataset([[0], SyncItems([1])])
    assert (mixed.in_memory, mixed[1]) == (False, 1)
    assert pickle.loads(pickle.dumps(mixed))[1] == 1


def test_bad_arguments_are_refused_naming_them() -> None:
    with pytest.raises(
        TypeError, match=r"^dataset must have async get_sample\(index\), .* but got int$"
    ):
        Subset(3, [0])
    with pytest.raises(IndexError, match=r"^indices must be in \[0, 3\) but got 3 at position 1$"):
        Subset([1, 2, 3], [0, 3])
    with pytest.raises(IndexError, match=r"^indices must be in \[0, 3\) but got -1 at position 0$"):
        Subset([1, 2, 3], [-1])
    with pytest.raises(
        TypeError,
        match=r"^indices must be a 1-D sequence of integers but got 1-D values of dtype float64$",
    ):
        Subset([1, 2, 3], [0.5])
    with pytest.raises(
        TypeError,
        match=r"^indices must be a 1-D sequence of integers but got 1-D values of dtype bool$",
    ):
        Subset([1, 2, 3], [True])
    with pytest.raises(TypeError, match=r"^indices must be a sequence of integers but got str$"):
        Subset([1, 2, 3], "01")
    assert len(Subset([1, 2, 3], [])) == 0
    with pytest.raises(ValueError, match=r"^datasets must hold at least one dataset but got none$"):
        ConcatDataset([])
    with pytest.raises(
        TypeError, match=r"^datasets\[1\] must have async get_sample\(index\), .* but got object$"
    ):
        ConcatDataset([[1], object()])
    with pytest.raises(TypeError, match=r"^datasets must be an iterable of datasets but got int$"):
        ConcatDataset(3)  # type: ignore[call-overload]


async def test_reads_outside_the_view_are_refused() -> None:
    subset: Any = Subset(Batched("abc"), [2, 1])
    with pytest.raises(IndexError, match=r"^index must be in \[0, 2\) but got 2$"):
        await subset.get_sample(2)
    with pytest.raises(TypeError, match=r"^index must be an integer but got str \('0'\)$"):
        await subset.get_sample("0")
    with pytest.raises(IndexError, match=r"^indices must be in \[0, 2\) but got 5 at position 1$"):
        await subset.get_samples([0, 5])
    both: Any = ConcatDataset([SyncItems("ab"), [1]])
    with pytest.raises(IndexError, match=r"^index must be in \[0, 3\) but got 3$"):
        both[3]
    with pytest.raises(IndexError, match=r"^index must be in \[0, 3\) but got -1$"):
        both[-1]


async def test_a_short_batched_read_is_an_error_naming_the_dataset() -> None:
    class Short(Batched):
        async def get_samples(self, indices: Sequence[int]) -> list[Any]:
            return []

    with pytest.raises(
        ValueError,
        match=r"^datasets\[1\]\.get_samples must return one sample per index \(2\) but returned 0$",
    ):
        await ConcatDataset([AsyncOnly([0]), Short([1, 2])]).get_samples([1, 2])  # type: ignore[attr-defined]


async def test_a_failing_sample_is_named_by_the_views_index() -> None:
    class Failing(Batched):
        async def get_samples(self, indices: Sequence[int]) -> list[Any]:
            error = OSError("gone")
            mark_sample_error(error, 4, "object 'x'")
            raise error

    both: Any = ConcatDataset([AsyncOnly([0, 1]), Subset(Failing(range(6)), [5, 4, 3])])
    with pytest.raises(OSError, match="gone") as caught:
        await both.get_samples([0, 3])
    assert caught.value.__aioloader_index__ == 3  # type: ignore[attr-defined]  # Failing's 4


async def test_the_loader_reads_views_exactly() -> None:
    inner = Batched(list(range(20)))
    view = ConcatDataset([Subset(inner, range(19, 9, -1)), [100, 101]])
    loader: DataLoader[Any, list[int]] = DataLoader(view, SequentialSampler(12, 4), list, seed=0)
    batches = [batch async for batch in loader.epoch()]
    assert batches == [[19, 18, 17, 16], [15, 14, 13, 12], [11, 10, 100, 101]]
    assert inner.batch_calls == [[19, 18, 17, 16], [15, 14, 13, 12], [11, 10]]
