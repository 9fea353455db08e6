"""What to read with a step: whole runs of shards, soonest needed first, in the room there is.

Each sample a step misses, then each one the next ``lookahead_steps`` steps need, brings
the run of its shard's neighbours that its epoch needs within ``fill_steps`` steps (one
range read). Read-ahead is held in the memory tier's bound until its step uses it, so it is
never evicted or dropped before use. What room a run may take is decided in ``_room``:
spare room ahead of need (a run without it waits for a later step), and at need
(``URGENT_STEPS``) the run's part needed soon may evict entries needed after it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from ._admission import Admission, DiskJob
from ._held import Holdings, size_of
from ._planner import NEVER
from ._plans import PlannedStream
from ._policy import ReadBudget
from ._room import RunTaker, Shape, grow_run
from ._source import RangeSource
from ._turns import Pending, Turn

__all__ = ("Chosen", "ReadAhead", "Reach")


@dataclass(frozen=True)
class Reach:
    """How far read-ahead looks: ``lookahead_steps`` steps are read with the current one,
    a run grows over what ``fill_steps`` steps need, within ``readahead_bytes``; requests
    span gaps of at most ``coalesce_gap`` bytes and ``max_request_bytes`` in all."""

    lookahead_steps: int
    fill_steps: int
    readahead_bytes: int
    coalesce_gap: int
    max_request_bytes: int


@dataclass
class Chosen:
    """Samples chosen to read ahead (marked on their way, their room reserved), and the
    disk work their room implies."""

    pending: dict[int, Pending]
    job: DiskJob


class ReadAhead:
    """Chooses what a step reads ahead, and makes its room."""

    def __init__(self, held: Holdings, admission: Admission, reach: Reach) -> None:
        self.held = held
        self.admission = admission
        self.reach = reach

    async def choose(self, stream: PlannedStream, step: int, need: set[int]) -> Chosen:
        """Samples to read with ``stream``'s step ``step``, which misses ``need`` (already
        on their way: each brings its run). Steps are ``stream``'s; next uses are on the
        cache's clock (``stream.time``). Chosen samples are marked on their way at once."""
        held, reach = self.held, self.reach
        source = held.bound_source()
        chosen = Chosen({}, DiskJob())
        planner = stream.planner
        soon = stream.time(step + reach.lookahead_steps)

        def free(unit: int) -> bool:
            return held.is_free(unit) and unit not in need

        def make_room(size: int, later: int, wanted: int) -> bool:
            return self._make_room(size, later, stream, chosen.job, wanted)

        taker = RunTaker(
            (step, lambda later: stream.time(later + reach.lookahead_steps)),
            free,
            functools.partial(size_of, source),
            functools.partial(held.plans.next_use, passes=False),
            make_room,
            ReadBudget(reach.readahead_bytes - held.memory.reserved),
            lambda: held.displaced.allows(stream.key, planner.epoch_end(step)),
        )
        furthest = step + max(reach.fill_steps, reach.lookahead_steps)

        def limits(later: int) -> tuple[int, int]:  # a run grows over what this epoch reads
            end = planner.epoch_end(later) - 1  # soon, and past held samples what it reads
            return stream.time(min(furthest, end)), min(soon, stream.time(end))  # very soon

        turn = Turn()
        for unit in sorted(need):  # a miss brings its run of neighbours needed soon
            held.pending[unit].run = unit
            run = await self._run(source, unit, limits(step), free, turn)
            await self._mark(taker.take(run, unit, step), unit, stream.key, chosen, turn)
        for later in range(step + 1, min(step + 1 + reach.lookahead_steps, planner.planned_until)):
            if planner.is_read(later):
                continue  # its read is under way: what it holds it does not need again
            for unit in planner.step_indices(later).tolist():
                await turn.pause_if_due()
                if not free(unit):
                    continue
                run = await self._run(source, unit, limits(later), free, turn)
                run = taker.take(run, unit, later)
                if not run:
                    return chosen  # the rest waits for room: a later step reads it whole
                await self._mark(run, unit, stream.key, chosen, turn)
        return chosen

    async def _mark(
        self, members: list[int], anchor: int, by: Hashable, chosen: Chosen, turn: Turn
    ) -> None:
        """Mark a run's members on their way (their room is made: see ``RunTaker``)."""
        held = self.held
        source = held.bound_source()
        for member in members:
            size = size_of(source, member)
            if size and held.is_free(member):  # an empty sample needs no read
                pending = chosen.pending[member] = held.pending[member] = Pending(size)
                pending.reserved, pending.by, pending.run = True, by, anchor
                held.pending_bytes += size
            else:
                held.memory.unreserve(size, by)
            await turn.pause_if_due()

    def _make_room(
        self, size: int, step: int, stream: PlannedStream, job: DiskJob, wanted: int
    ) -> bool:
        """Reserve ``size`` bytes in memory to read ahead for step ``step``; False if not.

        Only entries needed after ``wanted`` are evicted (they move to disk if it admits
        them; ``job`` gains the work), furthest first, and of those that no plan reads
        again only the ones a step of ``step``'s epoch already used (an older one may be
        needed beyond the horizon).
        """
        held = self.held
        planner = stream.planner
        since = stream.time(planner.epoch_end(step) - planner.steps_per_epoch)
        victims = held.memory.room_for(size, wanted, since, held.sharing(stream.key))
        if victims is None:
            return False
        known = sum(held.memory.sizes[v] for v in victims if held.next_use(v) < NEVER)
        held.displaced.add(stream.key, planner.epoch_end(step), known)
        job.add(self.admission.evict_from_memory(victims))
        held.memory.reserve(size, stream.key)
        return True

    async def _run(
        self,
        source: RangeSource,
        unit: int,
        limits: tuple[int, int],
        free: Callable[[int], bool],
        turn: Turn,
    ) -> list[int]:
        """``unit``'s run in its shard (see ``_room.grow_run``): neighbours free and needed by
        ``limits[0]``, and past samples held those needed by ``limits[1]``."""
        held, reach = self.held, self.reach

        def wanted(other: int) -> int:
            return held.plans.next_use(other, passes=False) if free(other) else NEVER

        def passed_over(other: int) -> bool:
            return held.holds(other) and other not in held.pending

        shape = Shape(source.span_of, len(source), reach.coalesce_gap, reach.max_request_bytes)
        return await grow_run(unit, shape, wanted, passed_over, limits, turn)
