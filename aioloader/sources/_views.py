"""Views over datasets: ``Subset`` (some indices of one) and ``ConcatDataset`` (several, end
to end), torch's two wrappers for the dataset protocol.

A view reads as the datasets under it do. Over sync datasets (``__getitem__``: a list, a
numpy array, a torch map-style dataset) it is sync, so the loader reads it in threads, or
inline when every dataset under it is in memory. Over async ones it has ``async
get_sample(index)``, and ``async get_samples(indices)`` when a dataset under it has one:
a batch is then read with one call per dataset under it.

>>> import anyio, numpy as np
>>> evens = Subset(np.arange(10) * 10, range(0, 10, 2))
>>> len(evens), int(evens[1]), evens.in_memory
(5, 20, True)
>>> both = ConcatDataset([evens, [7, 8]])
>>> len(both), both.cumulative_sizes, [int(both[i]) for i in (4, 5, 6)]
(7, [5, 7], [80, 7, 8])
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar, overload

import anyio
import numpy as np
import numpy.typing as npt

from .._protocols import BatchedDataset, Dataset, SyncDataset
from ._concurrency import gather_ordered

__all__ = ("ConcatDataset", "Subset")

SampleT = TypeVar("SampleT")
T = TypeVar("T")
Indices = Iterable[int] | npt.NDArray[np.integer[Any]]

_BATCHED, _ASYNC, _SYNC = "batched", "async", "sync"


def _kind(dataset: Any, name: str) -> str:
    """How ``dataset`` is read (the loader's rule): batched, async or sync."""
    if inspect.iscoroutinefunction(getattr(dataset, "get_samples", None)):
        return _BATCHED
    if inspect.iscoroutinefunction(getattr(dataset, "get_sample", None)):
        return _ASYNC
    if callable(getattr(dataset, "get_sample", None)) or callable(
        getattr(dataset, "__getitem__", None)
    ):
        if not callable(getattr(dataset, "__len__", None)):
            raise TypeError(f"{name} must have __len__ but got {type(dataset).__name__}")
        return _SYNC
    raise TypeError(
        f"{name} must have async get_sample(index), async get_samples(indices), "
        f"get_sample(index) or __getitem__(index) but got {type(dataset).__name__}"
    )


def _in_memory(dataset: Any) -> bool:
    """Whether a sync dataset never blocks (the loader's rule: it is read inline)."""
    if isinstance(dataset, (list, tuple, np.ndarray)):
        return True
    return getattr(dataset, "in_memory", False) is True


def _sync_getter(dataset: Any) -> Callable[[int], Any]:
    getter = getattr(dataset, "get_sample", None)
    return getter if callable(getter) else dataset.__getitem__  # type: ignore[no-any-return]


def _position(index: Any, length: int) -> int:
    """``index`` as an int in ``[0, length)``, or a ``TypeError``/``IndexError`` naming it."""
    if isinstance(index, (bool, np.bool_)) or not hasattr(index, "__index__"):
        raise TypeError(f"index must be an integer but got {type(index).__name__} ({index!r})")
    position = int(index)
    if not 0 <= position < length:
        raise IndexError(f"index must be in [0, {length}) but got {position}")
    return position


def _positions(values: Any, length: int, name: str) -> npt.NDArray[np.int64]:
    """``values`` as a 1-D int64 array, each in ``[0, length)``, or an error naming ``name``."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of integers but got {type(values).__name__}")
    array = np.asarray(values)
    if array.size == 0 and array.ndim == 1:
        return np.zeros(0, dtype=np.int64)
    if array.ndim != 1 or array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
        raise TypeError(
            f"{name} must be a 1-D sequence of integers but got {array.ndim}-D values of "
            f"dtype {array.dtype}"
        )
    outside = np.flatnonzero((array < 0) | (array >= length))
    if outside.size:
        first = int(outside[0])
        raise IndexError(
            f"{name} must be in [0, {length}) but got {int(array[first])} at position {first}"
        )
    return array.astype(np.int64, copy=False)


def _check_count(samples: Sequence[Any], count: int, name: str) -> list[Any]:
    if len(samples) != count:
        raise ValueError(
            f"{name}.get_samples must return one sample per index ({count}) but returned "
            f"{len(samples)}"
        )
    return list(samples)


def _name_outer(error: BaseException, inner: Sequence[int], outer: Sequence[int]) -> None:
    """Say on ``error`` which index of the view failed, where a source named its own.

    A source names the failing sample's index on the error (``__aioloader_index__``), for the
    loader to find its slot; through a view the loader knows the view's index instead.
    """
    index = getattr(error, "__aioloader_index__", None)
    if index is None:
        return
    for position, value in enumerate(inner):
        if value == index:
            error.__aioloader_index__ = outer[position]  # type: ignore[attr-defined]  # it has one
            return


async def _read_one(dataset: Any, kind: str, index: int) -> Any:
    if kind == _SYNC:
        getter = _sync_getter(dataset)
        if _in_memory(dataset):
            return getter(index)
        return await anyio.to_thread.run_sync(getter, index)
    if inspect.iscoroutinefunction(getattr(dataset, "get_sample", None)):
        return await dataset.get_sample(index)
    return (await _read_many(dataset, kind, [index], "dataset"))[0]


async def _read_many(dataset: Any, kind: str, indices: list[int], name: str) -> list[Any]:
    """The samples at ``indices`` of ``dataset``, in order, in one call to it where it can."""
    if kind == _BATCHED:
        return _check_count(await dataset.get_samples(indices), len(indices), name)
    if kind == _ASYNC:
        return await gather_ordered(dataset.get_sample, indices)
    getter = _sync_getter(dataset)
    if _in_memory(dataset):
        return [getter(index) for index in indices]
    return await anyio.to_thread.run_sync(lambda: [getter(index) for index in indices])


class Subset(Generic[SampleT]):
    """The samples of ``dataset`` at ``indices``, in that order (torch's ``Subset``).

    ``subset`` index ``i`` reads ``dataset`` index ``indices[i]``; an index may repeat. A
    batch is read with one ``dataset.get_samples`` call where the dataset has one. The
    instance is sync or async as ``dataset`` is (``Subset`` picks the kind).

    Args:
        dataset: any dataset the loader reads (async ``get_sample``/``get_samples`` or
            sync ``__getitem__``) with ``__len__``.
        indices: integers in ``[0, len(dataset))`` (a list, a range, a numpy array).

    Raises:
        TypeError: ``dataset`` is not a dataset, or ``indices`` are not 1-D integers.
        IndexError: an index is outside ``[0, len(dataset))``.

    Attributes:
        dataset: the dataset read.
        indices: the indices, a read-only int64 array.
    """

    dataset: Any
    indices: npt.NDArray[np.int64]
    _kind: str

    @overload
    def __new__(cls, dataset: BatchedDataset[T], indices: Indices) -> _BatchedSubset[T]: ...
    @overload
    def __new__(cls, dataset: Dataset[T], indices: Indices) -> _AsyncSubset[T]: ...
    @overload
    def __new__(cls, dataset: SyncDataset[T], indices: Indices) -> _SyncSubset[T]: ...
    @overload
    def __new__(cls, dataset: Any, indices: Any) -> Subset[Any]: ...
    def __new__(cls, dataset: Any, indices: Any) -> Subset[Any]:
        kind = _kind(dataset, "dataset")
        if not isinstance(indices, (Sequence, np.ndarray, range)):
            indices = list(indices)
        positions = _positions(indices, len(dataset), "indices")
        positions.flags.writeable = False
        self = super().__new__(_SUBSET_KINDS[kind])
        self.dataset, self.indices, self._kind = dataset, positions, kind
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (Subset, (self.dataset, self.indices))

    def __len__(self) -> int:
        return int(self.indices.size)

    def __repr__(self) -> str:
        return f"Subset({type(self.dataset).__name__}, {self.indices.size} indices)"

    def _inner(self, index: Any) -> int:
        return int(self.indices[_position(index, self.indices.size)])


class _SyncSubset(Subset[SampleT]):
    @property
    def in_memory(self) -> bool:
        """Whether the dataset under it is in memory (the loader reads it inline)."""
        return _in_memory(self.dataset)

    def __getitem__(self, index: int) -> SampleT:
        return _sync_getter(self.dataset)(self._inner(index))  # type: ignore[no-any-return]


class _AsyncSubset(Subset[SampleT]):
    async def get_sample(self, index: int) -> SampleT:
        """The dataset's sample at ``indices[index]``."""
        return await _read_one(self.dataset, self._kind, self._inner(index))  # type: ignore[no-any-return]


class _BatchedSubset(_AsyncSubset[SampleT]):
    async def get_samples(self, indices: Sequence[int]) -> list[SampleT]:
        """The samples at ``indices``, in order: one ``dataset.get_samples`` call."""
        positions = _positions(indices, self.indices.size, "indices")
        inner = self.indices[positions].tolist()
        try:
            return await _read_many(self.dataset, _BATCHED, inner, "dataset")
        except Exception as error:
            _name_outer(error, inner, positions.tolist())
            raise


_SUBSET_KINDS: dict[str, type[Subset[Any]]] = {
    _SYNC: _SyncSubset,
    _ASYNC: _AsyncSubset,
    _BATCHED: _BatchedSubset,
}


class ConcatDataset(Generic[SampleT]):
    """Several datasets end to end (torch's ``ConcatDataset``).

    Index ``i`` reads the dataset that holds it: the first ``len(datasets[0])`` indices are
    the first dataset's, the next ones the second's, and so on (lengths are read once, here).
    Over sync datasets only it is sync; otherwise it has ``async get_sample``, and ``async
    get_samples`` when one of the datasets has it: a batch is then read with one call per
    dataset it touches (``get_samples``, concurrent ``get_sample`` calls, or one thread call
    over a sync dataset's indices), the datasets concurrently.

    Args:
        datasets: one or more datasets the loader reads, each with ``__len__``.

    Raises:
        TypeError: one of ``datasets`` is not a dataset.
        ValueError: ``datasets`` is empty.

    Attributes:
        datasets: the datasets, a tuple.
        cumulative_sizes: where each dataset ends, a list of ints (torch's name).
    """

    datasets: tuple[Any, ...]
    cumulative_sizes: list[int]
    _kinds: list[str]
    _ends: npt.NDArray[np.int64]
    _starts: npt.NDArray[np.int64]

    @overload
    def __new__(cls, datasets: Iterable[SyncDataset[T]]) -> _SyncConcat[T]: ...
    @overload
    def __new__(cls, datasets: Iterable[Any]) -> _AsyncConcat[Any]: ...
    def __new__(cls, datasets: Any) -> ConcatDataset[Any]:
        listed = tuple(_listed(datasets))
        kinds = [_kind(dataset, f"datasets[{number}]") for number, dataset in enumerate(listed)]
        lengths = np.asarray([len(dataset) for dataset in listed], dtype=np.int64)
        if set(kinds) == {_SYNC}:
            kind: type[ConcatDataset[Any]] = _SyncConcat
        else:
            kind = _BatchedConcat if _BATCHED in kinds else _AsyncConcat
        self = super().__new__(kind)
        self.datasets, self._kinds = listed, kinds
        self._ends = np.cumsum(lengths)
        self._starts = self._ends - lengths
        self.cumulative_sizes = self._ends.tolist()
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (ConcatDataset, (self.datasets,))

    def __len__(self) -> int:
        return int(self._ends[-1])

    def __repr__(self) -> str:
        names = ", ".join(type(dataset).__name__ for dataset in self.datasets)
        return f"ConcatDataset([{names}], {len(self)} samples)"

    def _locate(self, index: Any) -> tuple[int, int]:
        """``(dataset number, its index)`` of view index ``index``."""
        position = _position(index, len(self))
        member = int(np.searchsorted(self._ends, position, side="right"))
        return member, position - int(self._starts[member])


def _listed(datasets: Any) -> list[Any]:
    if isinstance(datasets, (str, bytes)) or not isinstance(datasets, Iterable):
        raise TypeError(
            f"datasets must be an iterable of datasets but got {type(datasets).__name__}"
        )
    listed = list(datasets)
    if not listed:
        raise ValueError("datasets must hold at least one dataset but got none")
    return listed


class _SyncConcat(ConcatDataset[SampleT]):
    @property
    def in_memory(self) -> bool:
        """Whether every dataset under it is in memory (the loader reads it inline)."""
        return all(_in_memory(dataset) for dataset in self.datasets)

    def __getitem__(self, index: int) -> SampleT:
        member, inner = self._locate(index)
        return _sync_getter(self.datasets[member])(inner)  # type: ignore[no-any-return]


class _AsyncConcat(ConcatDataset[SampleT]):
    async def get_sample(self, index: int) -> SampleT:
        """The sample at ``index`` of the dataset that holds it."""
        member, inner = self._locate(index)
        return await _read_one(self.datasets[member], self._kinds[member], inner)  # type: ignore[no-any-return]


class _BatchedConcat(_AsyncConcat[SampleT]):
    async def get_samples(self, indices: Sequence[int]) -> list[SampleT]:
        """The samples at ``indices``, in order: one call per dataset they fall in."""
        positions = _positions(indices, len(self), "indices")
        members = np.searchsorted(self._ends, positions, side="right")
        inner = positions - self._starts[members]
        samples: list[Any] = [None] * positions.size

        async def read(member: int) -> None:
            where = np.flatnonzero(members == member)
            wanted = inner[where].tolist()
            try:
                got = await _read_many(
                    self.datasets[member], self._kinds[member], wanted, f"datasets[{member}]"
                )
            except Exception as error:
                _name_outer(error, wanted, positions[where].tolist())
                raise
            for slot, sample in zip(where.tolist(), got, strict=True):
                samples[slot] = sample

        await gather_ordered(read, np.unique(members).tolist())
        return samples
