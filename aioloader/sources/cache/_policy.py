"""Which entry to evict, and how much a read may bring ahead of need.

``EvictionOrder`` ranks a tier's entries: by next use (Belady: the furthest goes first) or
by recency (LRU). Among entries whose next use lies beyond the horizon (all equal to
Belady), the one used last goes first: an epoch reads each sample once, so what it used
last it needs furthest ahead, and a cache smaller than the data keeps, epoch after epoch,
entries that are each a hit once an epoch (the optimum).

Several streams share a tier fairly where their future is unknown: an entry beyond every
known plan belongs to the stream that used it last, and another stream evicts it only
while its owner holds more than its share (``Sharing``). Entries a known plan reads again
are ranked by next use over every plan (Belady over the union).
``ReadBudget`` is what the read-ahead cap leaves.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Literal

from ._planner import NEVER

__all__ = ("EvictionOrder", "Policy", "ReadBudget", "Sharing")

Policy = Literal["belady", "lru"]


@dataclass(frozen=True)
class Sharing:
    """The streams that share a tier, and the one asking for room.

    Attributes:
        reader: The stream whose read wants the room (None: a read no plan knows).
        streams: Every stream sharing the tier (live or expected back), in the order
            they came; each keeps ``max_bytes // len(streams)`` against the others.
    """

    reader: Hashable
    streams: tuple[Hashable, ...]


class EvictionOrder:
    """Entries of one tier, ranked for eviction (lazy heaps: stale items are skipped).

    Belady ranks by next use, furthest first; among entries the known plans do not read
    again (all ``NEVER``), the most recently used goes first (``used``): for a loader that
    reads every sample once an epoch, those are the ones needed furthest ahead, so the
    entries that the epoch still needs stay. Those entries are kept per owner (the stream
    that used them last, ``used(..., by=)``), so that ``pop_victims`` can spare another
    stream's share. LRU ranks by the time of ``push``.

    With ``span`` > 1, Belady ranks next uses within one span of steps alike and, among
    them, evicts the highest dataset index first: what goes is a contiguous run of a
    shard and what stays is kept whole, so that what is missing is read in few requests
    (a sample-exact order evicts the samples a group reads last from each of its shards,
    and leaves holes that cost a request each).
    """

    __slots__ = (
        "_beyond",
        "_heap",
        "_items",
        "_live",
        "_owner",
        "_policy",
        "_restore",
        "_seq",
        "_span",
        "_stamp",
    )

    def __init__(self, policy: Policy, span: int = 1) -> None:
        self._policy = policy
        self._span = span  # Belady: next uses within one span of steps rank alike
        self._heap: list[tuple[int, int, int]] = []  # LRU: all; Belady: known next uses
        self._beyond: dict[Hashable, list[tuple[int, int]]] = {}  # Belady, NEVER: per owner
        self._items = 0  # items in every heap, stale ones included
        self._live: dict[int, tuple[int, int]] = {}  # unit: (rank, seq)
        self._owner: dict[int, Hashable] = {}  # the stream that used it last (absent: none)
        self._seq = itertools.count()
        self._restore: dict[int, tuple[int, int]] = {}
        self._stamp: dict[int, int] = {}  # the step of each entry's latest use (-1: none)

    def __contains__(self, unit: int) -> bool:
        return unit in self._live

    def __len__(self) -> int:
        return len(self._live)

    def used(self, unit: int, step: int, by: Hashable = None) -> Hashable:
        """``unit`` was used at global step ``step`` by stream ``by`` (call before ``push``);
        returns the stream that used it before (None: none)."""
        self._stamp[unit] = step
        before = self._owner.pop(unit, None)
        if by is not None:
            self._owner[unit] = by
        return before

    def owner(self, unit: int) -> Hashable:
        """The stream that used ``unit`` last (None: none, or not known)."""
        return self._owner.get(unit)

    def push(self, unit: int, next_use: int) -> None:
        """Rank ``unit`` (again) with its next use; LRU ranks by this call's time instead."""
        seq = next(self._seq)
        if self._policy == "belady":  # furthest first; among equals, the latest used first
            rank, seq = -next_use, -self._stamp.setdefault(unit, -1)
            if self._span > 1 and next_use != NEVER:  # a span's: the highest sample first
                rank, seq = -(next_use - next_use % self._span), -unit
        else:
            rank = seq
        self._live[unit] = (rank, seq)
        self._place(unit)
        if self._items > 4 * len(self._live) + 1024:
            self._rebuild()

    def rank_all(self, next_use: int) -> None:
        """Rank every entry as next used at ``next_use`` (a new plan); LRU keeps its order."""
        if self._policy == "belady":
            self._live = {unit: (-next_use, seq) for unit, (_, seq) in self._live.items()}
            self._rebuild()

    def discard(self, unit: int) -> None:
        """Stop ranking ``unit`` for now (read ahead again, held until used)."""
        self._live.pop(unit, None)

    def forget(self, unit: int) -> Hashable:
        """``unit`` left the tier; returns the stream that used it last."""
        self._live.pop(unit, None)
        self._stamp.pop(unit, None)
        return self._owner.pop(unit, None)

    def pop_victims(
        self,
        needed: int,
        wanted: int,
        size_of: dict[int, int],
        used_since: int | None = None,
        others: Mapping[Hashable, int] | None = None,
        under: int = 0,
        rival: int | None = None,
    ) -> list[int] | None:
        """Units to evict to free ``needed`` bytes, each needed after ``wanted``; None if not.

        With a span, ``rival`` (the sample that wants the room, needed at ``wanted``) also
        evicts an entry of its own span with a higher dataset index.

        With ``used_since``, an entry the known plan does not read again qualifies only if
        it was used at that step or later (an older one may still be needed beyond what
        the plan knows). ``others`` maps each other stream sharing the tier to the bytes
        it holds over its share: such an entry of theirs goes only out of that excess
        (the largest excess first, before the reader's own), else it is spared. While the
        reader holds less than its share (``under`` > 0) it goes even for a sample whose
        next use is unknown too: unknown against unknown, the fair share decides.
        Nothing is evicted when the bytes cannot be freed: the units are ranked again.
        """
        excess = dict(others or {})
        victims: list[int] = []
        freed = 0
        while freed < needed:
            unit = self._next_victim(wanted, used_since, excess, under > 0, rival)
            if unit is None:
                for victim in victims:
                    self._live[victim] = self._restore.pop(victim)
                    self._place(victim)
                return None
            self._restore[unit] = self._live.pop(unit)
            owner = self._owner.get(unit)
            if owner in excess:
                excess[owner] -= size_of[unit]
            victims.append(unit)
            freed += size_of[unit]
        for unit in victims:
            self._restore.pop(unit, None)
        return victims

    def _next_victim(
        self,
        wanted: int,
        used_since: int | None,
        excess: dict[Hashable, int],
        fair: bool,
        rival: int | None = None,
    ) -> int | None:
        """The next entry to evict, or None when the next in line may not go."""
        if self._policy != "belady":
            top = self._top()
            return None if top is None else top[0]
        if wanted < NEVER or fair:  # another stream's entries beyond the plans: its excess
            for owner, over in sorted(excess.items(), key=lambda item: -item[1]):
                if over <= 0:
                    break
                found = self._beyond_top(owner)
                if found is not None:
                    return found[1]
        own: tuple[int, int] | None = None  # (seq, unit): entries of the reader or no stream
        for owner in list(self._beyond):
            if owner not in excess:
                found = self._beyond_top(owner)
                if found is not None and (own is None or found < own):
                    own = found
        if own is not None:
            seq, unit = own
            if wanted < NEVER and (used_since is None or -seq >= used_since):
                return unit
            return None  # used before ``used_since``: the plan may still need it
        top = self._top()
        if top is None or top[1] < wanted - wanted % self._span:
            return None
        if top[1] <= wanted and (self._span == 1 or rival is None or top[0] <= rival):
            return None  # needed as soon (a span: and not after ``rival`` in its shard)
        return top[0]

    def _place(self, unit: int) -> None:
        """Push ``unit``'s live rank into its heap."""
        rank, seq = self._live[unit]
        if self._policy == "belady" and rank == -NEVER:
            heapq.heappush(self._beyond.setdefault(self._owner.get(unit), []), (seq, unit))
        else:
            heapq.heappush(self._heap, (rank, seq, unit))
        self._items += 1

    def _rebuild(self) -> None:
        """Every heap again from the live ranks (drops the stale items)."""
        self._heap, self._beyond, self._items = [], {}, 0
        for unit in self._live:
            self._place(unit)

    def _top(self) -> tuple[int, int] | None:
        """``(unit, next use)`` ranked first among known next uses (LRU: all), or None."""
        heap = self._heap
        while heap:
            rank, seq, unit = heap[0]
            if self._live.get(unit) == (rank, seq):
                return unit, -rank
            heapq.heappop(heap)
            self._items -= 1
        return None

    def _beyond_top(self, owner: Hashable) -> tuple[int, int] | None:
        """``(seq, unit)`` first among ``owner``'s entries beyond the plans, or None."""
        heap = self._beyond.get(owner)
        while heap:
            seq, unit = heap[0]
            if self._live.get(unit) == (-NEVER, seq) and self._owner.get(unit) == owner:
                return seq, unit
            heapq.heappop(heap)
            self._items -= 1
        if heap is not None:
            del self._beyond[owner]
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
