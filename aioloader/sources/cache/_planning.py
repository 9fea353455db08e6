"""The plan: each stream's known future, installed, extended as reads move on, and forgotten.

A ``HorizonPlanner`` keeps a few windows of a stream's steps as numpy arrays, extended in
worker threads as the reads move on; each stream (training, evaluation) keeps its own, on
one clock (``_plans``). Each stream's next pass counts as known too (a stream that ended is
expected back), so what an epoch keeps is what the next one reads first. Whenever plans
come or go, every entry is ranked again by its next use.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import anyio

from ...core import check_sampler
from ._held import Holdings
from ._planner import HorizonPlanner
from ._plans import PlannedStream
from ._turns import Turn, on_the_loop

__all__ = ("FIRST_WINDOWS", "Horizon", "Planning")

FIRST_WINDOWS = 2
"""Windows a plan computes before its first step (a window spans at least the lookahead):
that step's read-ahead knows every step it may read for, so its runs cover whole shards
(with one window, a block straddling the window's end was read a few samples a request)."""


@dataclass(frozen=True)
class Horizon:
    """Steps planned at a time (``window_steps``), windows kept known ahead of the reads,
    and the slack of steps a planner keeps behind (at least ``4 * lookahead_steps``)."""

    window_steps: int
    windows: int
    lookahead_steps: int


class Planning:
    """Installs, extends and forgets the streams' plans, and ranks entries by them."""

    def __init__(self, held: Holdings, horizon: Horizon) -> None:
        self.held = held
        self.horizon = horizon

    def plan(
        self, sampler: Any, seed: int, steps: tuple[int, int | None], stream: Hashable | None
    ) -> Hashable:
        """Plan a stream (see ``KnownFutureCache.plan``) over ``steps``: its start and stop."""
        check_sampler(sampler)
        horizon = self.horizon
        start, stop = steps
        planner = HorizonPlanner(
            sampler,
            seed,
            start,
            window_steps=horizon.window_steps,
            windows=horizon.windows,
            slack=max(256, 4 * horizon.lookahead_steps),
            stop_step=stop,
        )
        for _ in range(FIRST_WINDOWS):
            first = planner.wanted_window()
            if first is not None:
                planner.install(planner.extend(first))
        after = None
        if planner.stop is not None and planner.stop > planner.start:  # the next pass
            after = HorizonPlanner(
                sampler,
                seed,
                planner.stop,
                window_steps=horizon.window_steps,
                windows=horizon.windows,
                slack=0,
                stop_step=2 * planner.stop - planner.start,
            )
            after.fill()
        key = (id(sampler), seed) if stream is None else stream
        on_the_loop(self._register, key, planner, after)
        return key

    def unplan(self, stream: Hashable) -> bool:
        """Forget ``stream``'s plan; False if it has none and is not expected back."""
        return bool(on_the_loop(self._unregister, stream))

    def _register(
        self, key: Hashable, planner: HorizonPlanner, after: HorizonPlanner | None
    ) -> None:
        units = planner.known_units()
        self._rerank(units, self.held.plans.add(key, planner, self.held.now, after))

    def _unregister(self, key: Hashable) -> bool:
        held = self.held
        held.displaced.forget(key)
        if not held.plans.forget(key):
            return False
        self._rerank([], None)
        return True

    def _rerank(self, fresh: list[int], new: PlannedStream | None) -> None:
        """Rank every entry again (``fresh``: the ``new`` plan's first windows, as used
        now); read-ahead no plan needs is dropped."""
        for unit in self.held.rerank(fresh, new):
            self.held.drop_ahead(unit)  # read ahead for a plan that is gone

    def match(self, indices: Any) -> tuple[PlannedStream, int] | None:
        """The stream and step whose batch ``indices`` is, taken as read now (None: no
        plan knows it); the last step of a stream ends its plan."""
        held = self.held
        matched = held.plans.match(indices)
        if matched is not None:
            stream, step = matched
            stream.planner.consume(step)
            held.now = max(held.now, stream.time(step))
            if stream.finished:  # its last step: the stream ends, its plan goes
                held.plans.end(stream)
        return matched

    def running_short(self, stream: PlannedStream, step: int) -> bool:
        """Whether ``stream``'s horizon ends within a window past the lookahead of ``step``."""
        horizon = self.horizon
        left = stream.planner.planned_until - step
        return left <= horizon.lookahead_steps + horizon.window_steps

    def wanting(self, stream: PlannedStream | None) -> list[PlannedStream]:
        """The streams (``stream``, or every one when None) whose horizon lacks windows."""
        streams = list(self.held.plans) if stream is None else [stream]
        return [each for each in streams if each.planner.wanted_window() is not None]

    async def extend(self, stream: PlannedStream) -> None:
        """Compute the windows ``stream``'s horizon lacks in worker threads, one at a time.

        One reader computes them; a reader that comes meanwhile waits for it.
        """
        if stream.extending is not None:
            await stream.extending.wait()
            return
        stream.extending = done = anyio.Event()
        planner = stream.planner
        try:
            while self.held.plans.holds(stream) and (first := planner.wanted_window()) is not None:
                known = await anyio.to_thread.run_sync(planner.extend, first)
                await self._notice(planner.install(known))
        finally:
            stream.extending = None
            done.set()

    async def _notice(self, units: list[int]) -> None:
        """New steps are known: rank again the entries they read."""
        turn = Turn()
        for unit in units:
            await turn.pause_if_due()
            self.held.rank_again(unit)
