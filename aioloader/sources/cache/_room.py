"""What a read-ahead run may take room from, and how much of a run to read (pure choices).

A shard's samples are read in one request only when the run is held from its read to its
samples' uses: room in the memory tier's bound, which the entries kept for their next use
want too. With a block shuffle (window 4) a group of four shards is read over a few steps,
so reading its shards whole needs about a group's bytes of room at the group's first step,
and gives it back as the steps use them. The trade, decided here:

- **Ahead of need, only spare room.** A run for a step further than ``URGENT_STEPS`` ahead
  takes free room and entries that no plan reads again (those its epoch already used),
  never an entry kept for a known next use: reading early never costs a hit. When that
  room is lacking, the run waits for a later step.
- **At need, the run wins over entries needed after it.** A run for the step being read (or
  one at most ``URGENT_STEPS`` away) that finds no spare room may evict entries whose next
  use comes after the run's last use (``last_use``), furthest first: those kept for the
  next epoch's late steps. Whole, while its epoch has displaced fewer kept bytes than the
  memory bound (``Displaced``); else cut to the samples needed within ``lookahead_steps``
  of the step it is read for, not of the step being read (``soon_part``: for a block
  shuffle, the whole group's part of the shard, even for a group of 16 steps read two
  steps before it starts). Those are the bytes this costs (a few per cent of the optimum:
  the entries of a later epoch that the runs displace); what it buys is one request for
  the shard instead of one per sample (a global shuffle needs few samples of a shard
  within the lookahead, so its cut runs are short). Halving (``fitting``) is the last
  resort, when even that finds no room.
- **Contiguous entries.** Memory ranks next uses within half the lookahead alike and
  evicts a contiguous run among them (``EvictionOrder`` with a span), so what the next
  epoch misses are whole runs, not holes; the disk tier ranks a whole horizon alike, so
  that its entries are not rewritten for small gains.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from ._planner import NEVER
from ._policy import ReadBudget
from ._ranges import ByteRange
from ._source import RangeSource
from ._turns import Pending, Turn

__all__ = (
    "PASS_OVER",
    "Displaced",
    "URGENT_STEPS",
    "RunTaker",
    "Shape",
    "between_held",
    "fitting",
    "grow_run",
    "last_use",
    "soon_part",
)

URGENT_STEPS = 2
"""A run for a step this close may evict entries needed after it; a later one waits."""
PASS_OVER = 4
"""A run passes over samples held only while their bytes stay within 1/PASS_OVER of its own."""


class RunTaker:
    """Room for the runs a step reads ahead, by the rules above.

    Args:
        steps: ``(step, soon)``: the step being read, and ``soon(later)``, the time (on the
            cache's clock) up to which a run at need for step ``later`` keeps its samples.
        free: Whether a sample is to be read (not held, not on its way).
        size_of: A sample's bytes.
        next_use: A sample's next use by the plans (the cache's clock).
        make_room: ``make_room(size, later, wanted)`` reserves ``size`` bytes for step
            ``later``, evicting only entries needed after ``wanted``; False if it cannot.
        budget: The read-ahead cap left.
        whole: Whether a run at need may still displace kept entries whole (see
            ``Displaced``); else it is cut to its part needed soon first.
    """

    def __init__(
        self,
        steps: tuple[int, Callable[[int], int]],
        free: Callable[[int], bool],
        size_of: Callable[[int], int],
        next_use: Callable[[int], int],
        make_room: Callable[[int, int, int], bool],
        budget: ReadBudget,
        whole: Callable[[], bool],
    ) -> None:
        self._step, self._soon = steps
        self._free, self._size_of, self._next_use = free, size_of, next_use
        self._make_room, self._budget, self._whole = make_room, budget, whole
        self._taken: list[int] = []

    def take(self, run: list[int], unit: int, later: int) -> list[int]:
        """The free samples of ``unit``'s run to read for step ``later``, their room made
        ([]: none; what the room evicted may lie inside the run, and is not among them)."""
        if self._room(run, later, NEVER - 1):
            return self._taken
        if later > self._step + URGENT_STEPS:
            return []
        if self._whole() and self._room(run, later, last_use(run, self._use_of)):
            return self._taken
        part = soon_part(run, unit, self._soon(later), self._use_of)
        fits = fitting(part, unit, lambda p: self._room(p, later, last_use(p, self._use_of)))
        return self._taken if fits else []

    def _use_of(self, unit: int) -> int:
        """A free sample's next use; -1 for one held or on its way (passed over)."""
        return self._next_use(unit) if self._free(unit) else -1

    def _room(self, run: list[int], later: int, wanted: int) -> bool:
        members = [u for u in run if self._free(u)]
        sizes = [self._size_of(u) for u in members]
        if not self._budget.take_all(sizes):
            return False
        if self._make_room(sum(sizes), later, wanted):
            self._taken = members
            return True
        self._budget.give_back(sum(sizes))
        return False


class Displaced:
    """Bytes of entries with a known next use that read-ahead evicted, per stream and
    epoch: whole runs at need may displace up to ``limit`` bytes an epoch (the memory
    bound), so that a later epoch reads at most that much again for fewer requests."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._bytes: dict[Hashable, tuple[int, int]] = {}

    def allows(self, stream: Hashable, epoch: int) -> bool:
        """Whether ``stream`` displaced less than ``limit`` bytes in epoch ``epoch``."""
        done = self._bytes.get(stream)
        return done is None or done[0] != epoch or done[1] < self.limit

    def add(self, stream: Hashable, epoch: int, size: int) -> None:
        """Count ``size`` bytes displaced by ``stream`` in epoch ``epoch``."""
        done = self._bytes.get(stream)
        before = done[1] if done is not None and done[0] == epoch else 0
        self._bytes[stream] = (epoch, before + size)

    def forget(self, stream: Hashable) -> None:
        """``stream`` is gone."""
        self._bytes.pop(stream, None)


@dataclass(frozen=True)
class Shape:
    """Where samples lie, and the bounds of one request."""

    span_of: Callable[[int], ByteRange]
    samples: int
    gap: int
    max_bytes: int


async def grow_run(
    unit: int,
    shape: Shape,
    wanted: Callable[[int], int],
    held: Callable[[int], bool],
    limits: tuple[int, int],
    turn: Turn,
) -> list[int]:
    """``unit`` and its neighbours of its shard, in one request: those needed (``wanted``)
    by ``limits[0]``, and past samples ``held`` (at most ``shape.gap`` bytes in a row:
    reading them again costs less than a request) those needed by ``limits[1]``; the held
    ones passed over belong to the run, and if their bytes exceed 1/``PASS_OVER`` of the
    others' the run stops at the first held sample instead.
    """
    scan = _Scan(unit, shape, wanted, held, turn)
    run = await scan.run(limits)
    passed = sum(_bytes(shape, u) for u in run if u != unit and held(u))
    if passed * PASS_OVER > sum(_bytes(shape, u) for u in run) - passed:
        run = await scan.run((limits[0], -1))
    return run


@dataclass(frozen=True)
class _Scan:
    """The scan of ``unit``'s neighbours in its shard, both ways (see ``grow_run``)."""

    unit: int
    shape: Shape
    wanted: Callable[[int], int]
    held: Callable[[int], bool]
    turn: Turn

    async def run(self, limits: tuple[int, int]) -> list[int]:
        """The run around ``unit`` within ``limits``."""
        shape = self.shape
        key, start, end = shape.span_of(self.unit)
        edges = []
        for direction in (-1, 1):
            edge, other, between = self.unit, self.unit + direction, 0
            while 0 <= other < shape.samples:
                other_key, begin, stop = shape.span_of(other)
                if other_key != key or max(end, stop) - min(start, begin) > shape.max_bytes:
                    break
                if self.wanted(other) <= limits[1 if between else 0]:
                    edge, between, start, end = other, 0, min(start, begin), max(end, stop)
                else:  # held: passed over while the bytes passed over stay cheap
                    between += stop - begin
                    if not self.held(other) or between > shape.gap:
                        break
                other += direction
                await self.turn.pause_if_due()
            edges.append(edge)
        return list(range(edges[0], edges[1] + 1))


def _bytes(shape: Shape, unit: int) -> int:
    _, start, end = shape.span_of(unit)
    return end - start


def soon_part(run: list[int], unit: int, by: int, next_use: Callable[[int], int]) -> list[int]:
    """The contiguous part of ``run`` around ``unit`` whose samples are needed by ``by``
    (``unit`` itself always belongs).

    >>> soon_part([4, 5, 6, 7, 8], 6, 10, {4: 3, 5: 20, 7: 9, 8: 11}.__getitem__)
    [6, 7]
    """
    at = run.index(unit)
    low = high = at
    while low > 0 and next_use(run[low - 1]) <= by:
        low -= 1
    while high + 1 < len(run) and next_use(run[high + 1]) <= by:
        high += 1
    return run[low : high + 1]


def last_use(run: list[int], next_use: Callable[[int], int]) -> int:
    """The latest next use among ``run``'s samples (-1 for an empty run)."""
    return max((next_use(unit) for unit in run), default=-1)


def fitting(run: list[int], unit: int, room: Callable[[list[int]], bool]) -> list[int]:
    """The longest part of ``run`` around ``unit`` that ``room`` accepts (halving it each
    time it does not), so that a run without room for all of it is still one read.

    >>> fitting(list(range(8)), 5, lambda part: len(part) <= 3)
    [4, 5]
    """
    while run:
        if room(run):
            return run
        if len(run) == 1:
            return []
        at = run.index(unit)
        half = max(1, len(run) // 2)
        low = min(max(0, at - half // 2), len(run) - half)
        run = run[low : low + half]
    return []


def between_held(
    source: RangeSource,
    holds: Callable[[int], bool],
    gap: ByteRange,
    owned: dict[int, Pending],
    unit: int,
) -> bool:
    """Whether the bytes ``gap`` may be read between ``unit`` and the sample read before
    it: no sample lies there, or only samples held, within one run (``Pending.run``)."""
    inside = source.indices_within(*gap)
    if not inside:
        return True
    run = owned[unit].run
    before = inside[0] - 1
    return run >= 0 and before in owned and owned[before].run == run and all(map(holds, inside))
