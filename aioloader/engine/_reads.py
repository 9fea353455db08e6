"""Reading one batch's samples from any kind of dataset, without blocking the event loop.

- ``async get_samples(indices)``: one call per batch (the source reads them concurrently);
- ``async get_sample(index)``: one task per sample, bounded by ``max_inflight_reads``;
- sync ``get_sample`` / ``__getitem__``: the whole batch is read in a worker thread.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from .._compat import BaseExceptionGroup, add_note
from ..core._plan import BatchPlan

BatchReader = Callable[[BatchPlan], Awaitable[list[Any]]]


def add_slot_note(error: BaseException, plan: BatchPlan, slot: int | None) -> None:
    """Name the global step, the slot and the dataset index on an exception."""
    if slot is None:
        where = f"dataset indices {plan.indices.tolist()}"
    else:
        where = f"slot {slot}, dataset index {int(plan.indices[slot])}"
    add_note(
        error,
        f"aioloader: while building global step {plan.global_step} "
        f"(epoch {plan.epoch}, step {plan.step}), {where}",
    )


class ReadCounter:
    """Reads in flight, for statistics."""

    __slots__ = ("in_flight", "peak", "total")

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.total = 0

    def begin(self, count: int) -> None:
        self.in_flight += count
        self.total += count
        self.peak = max(self.peak, self.in_flight)

    def end(self, count: int) -> None:
        self.in_flight -= count


def describe_dataset_kind(dataset: Any) -> str:
    """``"batched"``, ``"async"`` or ``"sync"``; TypeError for anything else."""
    if inspect.iscoroutinefunction(getattr(dataset, "get_samples", None)):
        return "batched"
    if inspect.iscoroutinefunction(getattr(dataset, "get_sample", None)):
        return "async"
    if callable(getattr(dataset, "get_sample", None)) or callable(
        getattr(dataset, "__getitem__", None)
    ):
        return "sync"
    raise TypeError(
        "dataset must have async get_sample(index), async get_samples(indices), "
        f"get_sample(index) or __getitem__(index) but got {type(dataset).__name__}"
    )


def make_batch_reader(dataset: Any, max_inflight_reads: int, counter: ReadCounter) -> BatchReader:
    """A coroutine function reading the samples of a plan, in slot order."""
    kind = describe_dataset_kind(dataset)
    if kind == "batched":
        return _batched_reader(dataset, counter)
    if kind == "async":
        return _async_reader(dataset, anyio.CapacityLimiter(max_inflight_reads), counter)
    getter = getattr(dataset, "get_sample", None)
    if not callable(getter):
        getter = dataset.__getitem__
    return _thread_reader(getter, anyio.CapacityLimiter(max_inflight_reads), counter)


def _check_count(plan: BatchPlan, samples: Sequence[Any]) -> list[Any]:
    if len(samples) != plan.size:
        raise ValueError(
            f"get_samples must return one sample per index ({plan.size}) but returned "
            f"{len(samples)} at global step {plan.global_step}"
        )
    return list(samples)


def _batched_reader(dataset: Any, counter: ReadCounter) -> BatchReader:
    async def read(plan: BatchPlan) -> list[Any]:
        counter.begin(plan.size)
        try:
            samples = await dataset.get_samples(plan.indices.tolist())
        except Exception as error:
            add_slot_note(error, plan, None)
            raise
        finally:
            counter.end(plan.size)
        return _check_count(plan, samples)

    return read


def _async_reader(
    dataset: Any, limiter: anyio.CapacityLimiter, counter: ReadCounter
) -> BatchReader:
    get_sample = dataset.get_sample

    async def read(plan: BatchPlan) -> list[Any]:
        indices = plan.indices.tolist()
        samples: list[Any] = [None] * len(indices)

        async def read_one(slot: int) -> None:
            async with limiter:
                counter.begin(1)
                try:
                    samples[slot] = await get_sample(indices[slot])
                except Exception as error:
                    add_slot_note(error, plan, slot)
                    raise
                finally:
                    counter.end(1)

        if len(indices) == 1:
            await read_one(0)
            return samples
        try:
            async with anyio.create_task_group() as group:
                for slot in range(len(indices)):
                    group.start_soon(read_one, slot)
        except BaseExceptionGroup as group_error:
            raise _first_error(group_error) from None
        return samples

    return read


def _first_error(group_error: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf of an exception group (a failed read), so errors keep their type."""
    error: BaseException = group_error
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def _thread_reader(
    getter: Callable[[int], Any], limiter: anyio.CapacityLimiter, counter: ReadCounter
) -> BatchReader:
    def read_all(plan: BatchPlan) -> list[Any]:
        samples = []
        for slot, index in enumerate(plan.indices.tolist()):
            try:
                samples.append(getter(index))
            except Exception as error:
                add_slot_note(error, plan, slot)
                raise
        return samples

    async def read(plan: BatchPlan) -> list[Any]:
        counter.begin(plan.size)
        try:
            return await anyio.to_thread.run_sync(read_all, plan, limiter=limiter)
        finally:
            counter.end(plan.size)

    return read
