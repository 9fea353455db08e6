"""Reading one batch's samples from any kind of dataset, without blocking the event loop.

- ``async get_samples(indices)``: one call per batch (the source reads them concurrently);
- ``async get_sample(index)``: each read starts in the builder's own task; a read that
  completes without waiting (memory, cache hit) costs no task at all, and each read that
  waits adds one task that goes on with the next slots, so tasks track reads in flight;
- sync ``get_sample`` / ``__getitem__``: read inline for an in-memory dataset, otherwise in
  threads (spread over the build threads in chunks when ``workers > 0``).

Reads in flight are bounded per stream by ``max_inflight_reads``.
"""

from __future__ import annotations

import inspect
import time
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from typing import Any, Protocol, cast

import anyio
import anyio.abc
import anyio.lowlevel
import numpy as np

from .._compat import BaseExceptionGroup, add_note
from .._ordered import Bound
from ..core import BatchPlan

BatchReader = Callable[[BatchPlan, anyio.abc.TaskGroup], Awaitable[list[Any]]]


class ChunkRunner(Protocol):
    """Runs a blocking function in one of the stream's build threads."""

    async def run(
        self, function: Callable[..., Any], *args: Any, priority: int | None = None
    ) -> Any: ...


def add_slot_note(error: BaseException, plan: BatchPlan, slot: int | None) -> None:
    """Name the global step, the slot and the dataset index on an exception.

    For a batched read (``slot is None``) the slot comes from the dataset index a source
    marked on the error with ``mark_sample_error``, when it did.
    """
    if slot is None:
        index = getattr(error, "__aioloader_index__", None)
        if index is not None:
            matches = np.flatnonzero(plan.indices == index)
            slot = int(matches[0]) if matches.size else None
    if slot is None:
        where = f"dataset indices {plan.indices.tolist()}"
    else:
        where = f"slot {slot}, dataset index {int(plan.indices[slot])}"
    add_note(
        error,
        f"aioloader: while building global step {plan.global_step} "
        f"(epoch {plan.epoch}, step {plan.step}), {where}",
    )


ReadBound = Bound
"""A stream's bound on reads in flight: the package's one counting bound (taking a unit
under it is a few integer operations, no checkpoint; a batch may exceed it alone)."""


# The clock of ``LoopSlice`` (tests replace it).
clock = time.perf_counter


class LoopSlice:
    """How long a stream's reads have run back to back since the event loop last turned.

    Reads that complete without waiting (memory, cache hits) run in the builders' tasks with
    no checkpoint; a runner checks the slice every ``check_every`` such reads and yields to
    the loop once it is spent. The slice is shared by every runner of the stream, so several
    builders ready at once hold the loop for one slice in all, not one each.
    """

    __slots__ = ("seconds", "started", "turn")

    check_every = 32

    def __init__(self, seconds: float = 0.001) -> None:
        self.seconds = seconds
        self.turn = 0
        self.started = clock()

    def spent(self) -> bool:
        return clock() - self.started >= self.seconds

    def after_wait(self, turn: int) -> None:
        """The caller waited since ``turn``: a new slice starts unless one already has."""
        if self.turn == turn:
            self.turn = turn + 1
            self.started = clock()

    async def give_way(self) -> None:
        """Let the loop run the other ready tasks, then go on in a fresh slice."""
        turn = self.turn
        await anyio.lowlevel.checkpoint()
        self.after_wait(turn)


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


def is_in_memory(dataset: Any) -> bool:
    """Whether a sync dataset is read on the event loop's thread, without a thread hop.

    True for lists, tuples and numpy arrays, and for any dataset whose ``in_memory``
    attribute is true (declare it on datasets whose reads never block).
    """
    if isinstance(dataset, (list, tuple, np.ndarray)):
        return True
    return getattr(dataset, "in_memory", False) is True


def sync_getter(dataset: Any) -> Callable[[int], Any] | None:
    """A sync dataset's ``get_sample`` (else ``__getitem__``); None for an async one."""
    if describe_dataset_kind(dataset) != "sync":
        return None
    getter = getattr(dataset, "get_sample", None)
    return getter if callable(getter) else dataset.__getitem__  # type: ignore[no-any-return]


def make_batch_reader(
    dataset: Any, bound: ReadBound, threads: ChunkRunner | None, chunks: int
) -> BatchReader:
    """A coroutine function reading the samples of a plan, in slot order."""
    kind = describe_dataset_kind(dataset)
    if kind == "batched":
        return _batched_reader(dataset, bound)
    if kind == "async":
        return _async_reader(dataset, bound)
    getter = sync_getter(dataset)
    assert getter is not None
    if is_in_memory(dataset):
        return _inline_reader(getter, bound)
    return _thread_reader(getter, bound, threads, chunks)


SampleReader = Callable[[int], Awaitable[Any]]


def make_sample_reader(dataset: Any) -> SampleReader:
    """A coroutine function reading one sample by index (to replace a bad sample)."""
    kind = describe_dataset_kind(dataset)
    if kind == "batched":

        async def read_batched(index: int) -> Any:
            samples = await dataset.get_samples([index])
            if len(samples) != 1:
                raise ValueError(
                    f"get_samples must return one sample per index (1) but returned {len(samples)}"
                )
            return samples[0]

        return read_batched
    if kind == "async":
        return cast(SampleReader, dataset.get_sample)
    getter = getattr(dataset, "get_sample", None)
    if not callable(getter):
        getter = dataset.__getitem__
    in_memory = is_in_memory(dataset)

    async def read_sync(index: int) -> Any:
        if in_memory:
            return getter(index)
        return await anyio.to_thread.run_sync(getter, index)

    return read_sync


def _check_count(plan: BatchPlan, samples: Sequence[Any]) -> list[Any]:
    if len(samples) != plan.size:
        raise ValueError(
            f"get_samples must return one sample per index ({plan.size}) but returned "
            f"{len(samples)} at global step {plan.global_step}"
        )
    return list(samples)


def _batched_reader(dataset: Any, bound: ReadBound) -> BatchReader:
    async def read(plan: BatchPlan, group: anyio.abc.TaskGroup) -> list[Any]:
        await bound.acquire(plan.size)
        try:
            samples = await dataset.get_samples(plan.indices.tolist())
        except Exception as error:
            add_slot_note(error, plan, None)
            raise
        finally:
            bound.release(plan.size)
        return _check_count(plan, samples)

    return read


# -- async get_sample ----------------------------------------------------------------------
@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], yielded: Any) -> Generator[Any, Any, Any]:
    """Go on awaiting ``coro``, which was started with ``send(None)`` and yielded ``yielded``.

    Every value is passed through to the event loop unchanged, so this works on any
    backend; the coroutine stays in the task that started it.
    """
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as error:  # cancellation and the like: the coroutine decides
            try:
                yielded = coro.throw(error)
            except StopIteration as done:
                return done.value
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as done:
                return done.value


class _BatchRead:
    """The shared state of one batch's reads: next slot, results, errors, runners."""

    __slots__ = (
        "done",
        "errors",
        "group",
        "indices",
        "next_slot",
        "plan",
        "runners",
        "samples",
        "waiting",
    )

    def __init__(self, plan: BatchPlan, group: anyio.abc.TaskGroup) -> None:
        self.plan = plan
        self.group = group
        self.indices: list[int] = plan.indices.tolist()
        self.samples: list[Any] = [None] * len(self.indices)
        self.next_slot = 0
        self.runners = 1
        self.waiting = 0
        self.errors: dict[int, BaseException] = {}
        self.done: anyio.Event | None = None


class _AsyncReader:
    """Reads of an async ``get_sample``: in the builder's task until one waits (module
    docstring); ``read`` is the batch reader."""

    __slots__ = ("_bound", "_get_sample", "_loop_slice")

    def __init__(self, dataset: Any, bound: ReadBound) -> None:
        self._get_sample = dataset.get_sample
        self._loop_slice = LoopSlice()
        self._bound = bound

    async def run_slots(self, batch: _BatchRead) -> None:
        """Read the next free slots one after the other, in this task, until none is left.

        A read that completes without waiting costs a coroutine and nothing else. When a
        read waits while every other runner of the batch waits too, a new runner starts to
        go on with the next slots meanwhile: with slow reads (network) the runners soon
        number the reads in flight; with reads that wait briefly, a few suffice. Reads
        that do not wait give the loop its turn every ``LoopSlice`` of them.
        """
        get_sample, loop_slice, bound = self._get_sample, self._loop_slice, self._bound
        indices = batch.indices
        samples = batch.samples
        count = len(indices)
        inline, check_every = 0, LoopSlice.check_every
        holding = False  # a unit of the bound, passed on from one read to the next
        try:
            while batch.next_slot < count and not batch.errors:
                if inline >= check_every:
                    inline = 0
                    if loop_slice.spent():
                        if holding:  # no read is in flight while the loop has its turn
                            holding = False
                            bound.release()
                        await loop_slice.give_way()
                        continue  # other runners may have taken the last slots meanwhile
                if holding:
                    bound.total += 1
                elif bound.try_acquire():
                    holding = True
                else:
                    await bound.acquire()
                    holding = True
                    if batch.next_slot >= count or batch.errors:
                        holding = False
                        bound.unacquire()
                        return
                slot = batch.next_slot
                batch.next_slot = slot + 1
                coro = get_sample(indices[slot])
                try:
                    try:
                        yielded = coro.send(None)
                    except StopIteration as done:
                        samples[slot] = done.value
                        inline += 1
                        continue
                    batch.waiting += 1
                    if batch.waiting == batch.runners and batch.next_slot < count:
                        batch.runners += 1
                        batch.group.start_soon(self.spawned_runner, batch)
                    turn = loop_slice.turn
                    try:
                        samples[slot] = await _resume(coro, yielded)
                    finally:
                        batch.waiting -= 1
                    loop_slice.after_wait(turn)
                except Exception as error:
                    add_slot_note(error, batch.plan, slot)
                    batch.errors[slot] = error
                    return
        finally:
            if holding:
                bound.release()

    async def spawned_runner(self, batch: _BatchRead) -> None:
        """A runner started when every other runner of ``batch`` waits."""
        try:
            await self.run_slots(batch)
        finally:
            batch.runners -= 1
            if batch.runners == 0 and batch.done is not None:
                batch.done.set()

    async def read(self, plan: BatchPlan, group: anyio.abc.TaskGroup) -> list[Any]:
        """Read ``plan``'s samples; runners that a waiting read starts go into ``group``.

        ``group`` is the builder's own long-lived task group, entered before any read
        starts, so a read that waits stays inside the same cancel scopes from start to end.
        """
        batch = _BatchRead(plan, group)
        await self.run_slots(batch)
        batch.runners -= 1
        if batch.runners:
            batch.done = anyio.Event()
            await batch.done.wait()
        if batch.errors:
            raise batch.errors[min(batch.errors)]
        return batch.samples


def _async_reader(dataset: Any, bound: ReadBound) -> BatchReader:
    return _AsyncReader(dataset, bound).read


# -- sync get_sample / __getitem__ --------------------------------------------------------------
def read_chunk(getter: Callable[[int], Any], plan: BatchPlan, first: int, last: int) -> list[Any]:
    """``getter(index)`` for slots ``[first, last)`` of ``plan``, in order.

    No Python call per sample but the getter's own (a list's ``__getitem__`` makes none).
    """
    indices = plan.indices[first:last].tolist()
    samples: list[Any] = []
    append = samples.append
    coroutine = types.CoroutineType
    for offset, index in enumerate(indices):
        try:
            sample = getter(index)
        except Exception as error:
            add_slot_note(error, plan, first + offset)
            raise
        if isinstance(sample, coroutine):
            sample.close()
            raise TypeError(
                "a sync dataset's get_sample/__getitem__ must return a sample but "
                f"{getattr(getter, '__qualname__', getter)!r} returned a coroutine; "
                "declare get_sample with async def"
            )
        append(sample)
    return samples


def _inline_reader(getter: Callable[[int], Any], bound: ReadBound) -> BatchReader:
    async def read(plan: BatchPlan, group: anyio.abc.TaskGroup) -> list[Any]:
        bound.total += plan.size
        return read_chunk(getter, plan, 0, plan.size)

    return read


def _thread_reader(
    getter: Callable[[int], Any], bound: ReadBound, threads: ChunkRunner | None, chunks: int
) -> BatchReader:
    limiter = anyio.CapacityLimiter(bound.limit)

    async def read(plan: BatchPlan, group: anyio.abc.TaskGroup) -> list[Any]:
        size = plan.size
        await bound.acquire(size)
        try:
            if threads is None or chunks <= 1 or size < 2:
                return await anyio.to_thread.run_sync(
                    read_chunk, getter, plan, 0, size, limiter=limiter
                )
            parts = min(chunks, size)
            edges = [size * part // parts for part in range(parts + 1)]
            results: list[list[Any]] = [[] for _ in range(parts)]
            errors: dict[int, BaseException] = {}

            async def read_part(part: int) -> None:
                try:
                    results[part] = await threads.run(
                        read_chunk,
                        getter,
                        plan,
                        edges[part],
                        edges[part + 1],
                        priority=plan.global_step,
                    )
                except Exception as error:
                    errors[part] = error
                    raise

            try:
                async with anyio.create_task_group() as group:
                    for part in range(parts):
                        group.start_soon(read_part, part)
            except BaseExceptionGroup:
                if errors:
                    raise errors[min(errors)] from None
                raise
            return [sample for part in results for sample in part]
        finally:
            bound.release(size)

    return read
