"""Which entry to evict, and how much a read may bring ahead of need.

``EvictionOrder`` ranks a tier's entries: by next use (Belady: the furthest goes first) or
by recency (LRU). Among entries whose next use lies beyond the horizon (all equal to
Belady), the one that came in last goes first, so a cache smaller than the data keeps a
stable subset from epoch to epoch (each of its bytes a hit once an epoch: the optimum).
``ReadBudget`` is the room left in the read-ahead buffer.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Literal

__all__ = ("EvictionOrder", "Policy", "ReadBudget")

Policy = Literal["belady", "lru"]


class EvictionOrder:
    """Entries of one tier, ranked for eviction (a lazy heap: stale items are skipped)."""

    __slots__ = ("_born", "_heap", "_live", "_policy", "_restore", "_seq")

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self._heap: list[tuple[int, int, int]] = []
        self._live: dict[int, tuple[int, int]] = {}
        self._seq = itertools.count()
        self._restore: dict[int, tuple[int, int]] = {}
        self._born: dict[int, int] = {}  # when each entry came in (kept while it stays)

    def __contains__(self, unit: int) -> bool:
        return unit in self._live

    def __len__(self) -> int:
        return len(self._live)

    def push(self, unit: int, next_use: int) -> None:
        """Rank ``unit`` (again) with its next use; LRU ranks by this call's time instead."""
        seq = next(self._seq)
        if self._policy == "belady":  # furthest first; among equals, the newest entry first
            rank, seq = -next_use, -self._born.setdefault(unit, seq)
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
        self._born.pop(unit, None)

    def pop_victims(self, needed: int, wanted: int, size_of: dict[int, int]) -> list[int] | None:
        """Units to evict to free ``needed`` bytes, each needed after ``wanted``; None if not.

        Nothing is evicted when the bytes cannot be freed: the units are ranked again.
        """
        victims: list[int] = []
        freed = 0
        while freed < needed:
            top = self._top()
            if top is None or (self._policy == "belady" and top[1] <= wanted):
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

    def _top(self) -> tuple[int, int] | None:
        """``(unit, next use)`` ranked first, or None when empty."""
        while self._heap:
            rank, seq, unit = self._heap[0]
            if self._live.get(unit) == (rank, seq):
                return unit, -rank
            heapq.heappop(self._heap)
        return None


class ReadBudget:
    """Bytes a read may still bring ahead of need: the read-ahead buffer's free room.

    Entries read ahead wait in a buffer of their own until their step uses them, so
    read-ahead never evicts anything; it stops when the buffer is full. Reserving for a
    run is all or nothing.
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
