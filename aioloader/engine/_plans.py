"""Planning steps ahead, several per trip to a build thread.

A plan is cheap (microseconds) except at an epoch's first step, where a sampler may order
a whole epoch; so planning stays off the event loop, but one trip to a thread per step
would cost more than the plan itself. ``PlanAhead`` plans a run of consecutive steps in
one trip and hands them out as builders claim the steps. A step's planning error is kept
and raised when that step is asked for, with the same note as ever.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from .._compat import add_note
from ..core import BatchPlan

RunInThread = Callable[..., Awaitable[Any]]


def plan_steps(plan: Callable[[int], BatchPlan], first: int, stop: int) -> list[Any]:
    """``plan(step)`` for every step of ``[first, stop)``: each a plan or the error raised."""
    plans: list[Any] = []
    for step in range(first, stop):
        try:
            plans.append(plan(step))
        except Exception as error:
            add_note(error, f"aioloader: while planning global step {step}")
            plans.append(error)
    return plans


class PlanAhead:
    """The plans of a stream's steps, ``run`` of them per trip to a build thread.

    Args:
        plan: ``step -> BatchPlan`` (the loader's ``LoaderConfig.plan``).
        stop: The stream's stop step (``None``: endless); nothing at or past it is planned.
        run: How many consecutive steps one trip plans.

    Only the event loop's tasks call ``get``; they may ask for steps in any order.
    """

    __slots__ = ("_pending", "_plan", "_ready", "_run", "_stop", "trips")

    def __init__(self, plan: Callable[[int], BatchPlan], stop: int | None, run: int) -> None:
        self._plan = plan
        self._stop = stop
        self._run = max(1, run)
        self._ready: dict[int, Any] = {}
        self._pending: dict[int, anyio.Event] = {}
        self.trips = 0

    def holds(self, step: int) -> bool:
        """Whether ``step`` is planned or being planned (``get`` will not start a trip)."""
        return step in self._ready or step in self._pending

    async def get(self, step: int, in_thread: RunInThread) -> BatchPlan:
        """The plan of ``step`` (or its error, raised), planned by ``in_thread`` if not yet."""
        while step not in self._ready:
            pending = self._pending.get(step)
            if pending is None:
                await self._plan_from(step, in_thread)
            else:  # another task's trip plans it
                await pending.wait()
        found = self._ready.pop(step)
        if isinstance(found, BaseException):
            raise found
        return found  # type: ignore[no-any-return]

    async def _plan_from(self, first: int, in_thread: RunInThread) -> None:
        stop = first + 1
        limit = first + self._run if self._stop is None else min(first + self._run, self._stop)
        while stop < limit and stop not in self._ready and stop not in self._pending:
            stop += 1
        done = anyio.Event()
        for step in range(first, stop):
            self._pending[step] = done
        try:
            self.trips += 1
            plans = await in_thread(plan_steps, self._plan, first, stop)
            self._ready.update(zip(range(first, stop), plans, strict=True))
        finally:
            for step in range(first, stop):
                del self._pending[step]
            done.set()
