"""Which entry to evict, and how much a read may bring ahead of need.

``EvictionOrder`` ranks a tier's entries: by next use (Belady: the furthest goes first) or
by recency (LRU). Among entries whose next use lies beyond the horizon (all equal to
Belady), the one used last goes first: an epoch reads each sample once, so what it used
last it needs furthest ahead, and a cache smaller than the data keeps, epoch after epoch,
entries that are each a hit once an epoch (the optimum).
``ReadBudget`` is what the read-ahead cap leaves.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Literal

from ._planner import NEVER

__all__ = ("EvictionOrder", "Policy", "ReadBudget")

Policy = Literal["belady", "lru"]


class EvictionOrder:
    """Entries of one tier, ranked for eviction (a lazy heap: stale items are skipped).

    Belady ranks by next use, furthest first; among entries the known plan does not read
    again (all ``NEVER``), the most recently used goes first (``used``): for a loader that
    reads every sample once an epoch, those are the ones needed furthest ahead, so the
    entries that the epoch still needs stay. LRU ranks by the time of ``push``.
    """

    __slots__ = ("_heap", "_live", "_policy", "_restore", "_seq", "_stamp")

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self._heap: list[tuple[int, int, int]] = []
        self._live: dict[int, tuple[int, int]] = {}
        self._seq = itertools.count()
        self._restore: dict[int, tuple[int, int]] = {}
        self._stamp: dict[int, int] = {}  # the step of each entry's latest use (-1: none)

    def __contains__(self, unit: int) -> bool:
        return unit in self._live

    def __len__(self) -> int:
        return len(self._live)

    def used(self, unit: int, step: int) -> None:
        """``unit`` was used at global step ``step`` (call before ``push``)."""
        self._stamp[unit] = step

    def push(self, unit: int, next_use: int) -> None:
        """Rank ``unit`` (again) with its next use; LRU ranks by this call's time instead."""
        seq = next(self._seq)
        if self._policy == "belady":  # furthest first; among equals, the latest used first
            rank, seq = -next_use, -self._stamp.setdefault(unit, -1)
        else:
            rank = seq
        self._live[unit] = (rank, seq)
        heapq.heappush(self._heap, (rank, seq, unit))
        if len(self._heap) > 4 * len(self._live) + 1024:
            self._heap = [(r, s, u) for u, (r, s) in self._live.items()]
            heapq.heapify(self._heap)

    def rank_all(self, next_use: int) -> None:
        """Rank every entry as next used at ``next_use`` (a new plan); LRU keeps its order."""
        if self._policy == "belady":
            self._live = {unit: (-next_use, seq) for unit, (_, seq) in self._live.items()}
            self._heap = [(rank, seq, unit) for unit, (rank, seq) in self._live.items()]
            heapq.heapify(self._heap)

    def discard(self, unit: int) -> None:
        """Stop ranking ``unit`` for now (read ahead again, held until used)."""
        self._live.pop(unit, None)

    def forget(self, unit: int) -> None:
        """``unit`` left the tier."""
        self._live.pop(unit, None)
        self._stamp.pop(unit, None)

    def pop_victims(
        self, needed: int, wanted: int, size_of: dict[int, int], used_since: int | None = None
    ) -> list[int] | None:
        """Units to evict to free ``needed`` bytes, each needed after ``wanted``; None if not.

        With ``used_since``, an entry the known plan does not read again qualifies only if
        it was used at that step or later (an older one may still be needed beyond what
        the plan knows). Nothing is evicted when the bytes cannot be freed: the units are
        ranked again.
        """
        victims: list[int] = []
        freed = 0
        while freed < needed:
            top = self._top()
            if top is None or (
                self._policy == "belady" and not self._may_go(top, wanted, used_since)
            ):
                for unit in victims:
                    self._live[unit] = self._restore.pop(unit)
                    heapq.heappush(self._heap, (*self._live[unit], unit))
                return None
            unit = top[0]
            self._restore[unit] = self._live.pop(unit)
            victims.append(unit)
            freed += size_of[unit]
        for unit in victims:
            self._restore.pop(unit, None)
        return victims

    def _may_go(self, top: tuple[int, int] | None, wanted: int, used_since: int | None) -> bool:
        if top is None:
            return False
        unit, next_use = top
        if next_use <= wanted:
            return False
        return used_since is None or next_use < NEVER or self._stamp.get(unit, -1) >= used_since

    def _top(self) -> tuple[int, int] | None:
        """``(unit, next use)`` ranked first, or None when empty."""
        while self._heap:
            rank, seq, unit = self._heap[0]
            if self._live.get(unit) == (rank, seq):
                return unit, -rank
            heapq.heappop(self._heap)
        return None


class ReadBudget:
    """Bytes a read may still bring ahead of need, under the cap ``readahead_bytes``.

    Reserving for a run is all or nothing.
    """

    __slots__ = ("_room",)

    def __init__(self, room: int) -> None:
        self._room = room

    def take_all(self, sizes: list[int]) -> bool:
        """Reserve ``sum(sizes)`` bytes, or nothing when they do not fit."""
        total = sum(sizes)
        if total > self._room:
            return False
        self._room -= total
        return True

    def give_back(self, size: int) -> None:
        """Return ``size`` bytes taken for a run that found no room after all."""
        self._room += size
