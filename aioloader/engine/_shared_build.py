"""A step built on the stream's threads, its transforms shared among the idle ones.

A step whose samples are in waits for its transforms and its collate. When threads are
idle (the first steps, or a read-bound stream), one step's transforms split among them
finish in a fraction of the time, so its batch is ready sooner; a busy pool builds a step
on one thread, as splitting would only add trips through the loop. The last part to
finish collates on its own thread. Each slot's transform and rng are those of
``build_batch``, so the batch is the same bit for bit, and an error is that of the lowest
failing slot, as when one thread transforms them in order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import anyio

from ..core import BatchPlan, release_batch
from ._build import build_batch, collate_batch, transform_slots
from ._config import LoaderConfig
from ._threads import BuildThreads

__all__ = ("SPLIT_WORTH_SECONDS", "SharedBuilds")

SPLIT_WORTH_SECONDS = 0.002
"""A step's transforms are split only when they take at least this long on one thread:
the trips through the loop that splitting adds (tens of microseconds) then cost little."""

Timer = Callable[..., Any]


class SharedBuilds:
    """Builds steps on ``threads``, split among idle ones when the transforms are worth it.

    ``next_to_take()`` is the step the consumer receives next. The lowest step from there
    whose samples are not in yet is the one it will wait for. A free thread takes the
    lowest step queued, and the awaited step's transforms are split among idle threads
    when its samples come. Before the stream's first batch (``first``: its start step), a
    later step also leaves a thread free for it while it reads (with two threads or more),
    so that the first batch never waits for a later one; after it, no thread is held idle.
    ``clock`` times the transforms (seconds).
    """

    def __init__(
        self,
        config: LoaderConfig,
        threads: BuildThreads,
        next_to_take: Callable[[], int],
        first: int,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._config = config
        self._clock = clock
        self._threads = threads
        self._next_to_take = next_to_take
        self._first = first
        self._seconds_per_slot: float | None = None  # the last job's, on its thread
        self._begun: set[int] = set()  # steps at or past ``next_to_take`` whose samples are in
        self._waiting: list[anyio.Event] = []

    def _awaited(self) -> int:
        """The lowest step the consumer will take whose samples are not in."""
        step = self._next_to_take()
        begun = self._begun
        for done in [done for done in begun if done < step]:
            begun.discard(done)
        while step in begun:
            step += 1
        return step

    def _wake(self) -> None:
        waiting, self._waiting = self._waiting, []
        for event in waiting:
            event.set()

    async def _wait_for_room(self, step: int) -> bool:
        """Whether ``step`` is the awaited one, once it may start: before the first batch, a
        later step waits while starting it would leave no thread for the first step."""
        reserve = 1 if self._threads.workers > 1 else 0
        while (
            (awaited := self._awaited()) < step
            and awaited == self._first == self._next_to_take()
            and self._threads.spare() <= reserve
        ):
            event = anyio.Event()
            self._waiting.append(event)
            await event.wait()
        return awaited == step

    def parts(self, size: int, awaited: bool) -> int:
        """Into how many parts a step of ``size`` slots would split now: only the awaited
        step: a later one would hold threads the awaited one may need."""
        per_slot = self._seconds_per_slot
        if not awaited or self._config.transform is None or size < 2:
            return 1
        if per_slot is not None and per_slot * size < SPLIT_WORTH_SECONDS:
            return 1
        return max(1, min(self._threads.spare(), size))

    async def build(self, plan: BatchPlan, samples: list[Any], timer: Timer | None) -> Any:
        """The batch of ``plan`` from its ``samples`` (the same as ``build_batch``'s);
        ``timer`` (the tuner's meter, or None) also times each job."""
        step = plan.global_step
        awaited = await self._wait_for_room(step)
        self._begun.add(step)
        self._wake()  # the awaited step may have moved on
        try:
            return await self._build(plan, samples, timer, awaited)
        finally:
            self._wake()  # a thread is free

    async def _build(
        self, plan: BatchPlan, samples: list[Any], timer: Timer | None, awaited: bool
    ) -> Any:
        config, threads, step = self._config, self._threads, plan.global_step
        parts = self.parts(plan.size, awaited)
        if parts == 1:
            args = (plan, samples, config.transform, config.collator, config.takes_rng)
            call = self._timing(timer, build_batch, plan.size, *args)
            return await threads.run(*call, discard=release_batch, priority=step)
        parts_of_step = _Parts(plan, samples, parts, config)
        batches: list[Any] = []
        errors: dict[int, BaseException] = {}  # as itself, never in an exception group
        cancelled = anyio.get_cancelled_exc_class()

        async def run_part(part: int) -> None:
            try:
                call = self._timing(timer, parts_of_step.run, parts_of_step.slots(part), part)
                batch = await threads.run(*call, discard=_release, priority=step)
            except cancelled:
                raise
            except BaseException as error:  # every part runs: the lowest slot's is raised
                errors[part] = error
            else:
                if batch is not None:
                    batches.append(batch)

        async with anyio.create_task_group() as group:
            for part in range(parts):
                group.start_soon(run_part, part)
        if errors:
            for batch in batches:
                release_batch(batch)
            raise errors[min(errors)]
        (batch,) = batches
        return batch

    def _timing(
        self, timer: Timer | None, function: Callable[..., Any], slots: int, *args: Any
    ) -> tuple[Any, ...]:
        """``run``'s arguments: ``function(*args)`` timed, ``slots`` being the slots it
        transforms (its seconds per slot decide later splits), and by ``timer`` too."""
        call = (self._timed, function, slots, *args)
        return call if timer is None else (timer, *call)

    def _timed(self, function: Callable[..., Any], slots: int, *args: Any) -> Any:
        started = self._clock()
        result = function(*args)
        if slots:
            self._seconds_per_slot = (self._clock() - started) / slots
        return result


def _release(batch: Any) -> None:
    if batch is not None:
        release_batch(batch)


class _Parts:
    """One step's transforms in ``parts`` parts, each run on a thread; the last part to
    finish collates there (no trip through the loop between the transforms and the
    collate), unless a part failed."""

    def __init__(self, plan: BatchPlan, samples: list[Any], parts: int, config: LoaderConfig):
        assert config.transform is not None
        self._plan, self._samples, self._config = plan, samples, config
        self._transform = config.transform
        self._edges = [plan.size * part // parts for part in range(parts + 1)]
        self._results: list[list[Any]] = [[] for _ in range(parts)]
        self._left = parts
        self._failed = False
        self._lock = threading.Lock()

    def slots(self, part: int) -> int:
        """How many slots ``part`` transforms."""
        return self._edges[part + 1] - self._edges[part]

    def run(self, part: int) -> Any:
        """Transform ``part``'s slots; the batch if this part finished last, else None."""
        config = self._config
        start, stop = self._edges[part], self._edges[part + 1]
        try:
            transformed = transform_slots(
                self._plan, self._samples, start, stop, self._transform, config.takes_rng
            )
        except Exception:
            with self._lock:
                self._failed, self._left = True, self._left - 1
            raise
        with self._lock:
            self._results[part] = transformed
            self._left -= 1
            last = self._left == 0 and not self._failed
        if not last:
            return None
        samples = [sample for part_samples in self._results for sample in part_samples]
        return collate_batch(self._plan, samples, config.collator)
