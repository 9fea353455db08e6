"""What the known-future cache shares with its source and its users, and its byte budget.

``RangeSource`` is what a source offers the cache (``TarShards`` implements it);
``CacheStatistics`` is the cache's counters; ``ReadBudget`` decides how much a read may
bring ahead of need without pushing out what is needed sooner.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from typing import Protocol

from ._coalesce import ByteRange

__all__ = ("CacheStatistics", "RangeSource", "ReadBudget", "span_size")


class RangeSource(Protocol):
    """What the cache needs from the source it serves (``TarShards`` implements it)."""

    def __len__(self) -> int: ...

    def span_of(self, index: int) -> ByteRange:
        """``(key, start, end)``: where sample ``index``'s bytes lie."""
        ...

    def indices_within(self, key: str, start: int, end: int) -> range:
        """The samples whose spans lie inside bytes ``[start, end)`` of ``key``."""
        ...

    async def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``key``, all of them (one request)."""
        ...


@dataclass(frozen=True)
class CacheStatistics:
    """Counters of a ``KnownFutureCache``.

    Attributes:
        hits: Samples a batch found cached (or already on their way).
        misses: Samples a batch had to read.
        requests: Ranged reads the cache issued.
        bytes_fetched: Bytes those reads returned.
        bytes_evicted: Bytes of entries evicted.
        evictions: Entries evicted.
        current_bytes: Bytes held now (never above ``max_bytes``).
        peak_bytes: Most bytes ever held.
        max_bytes: The bound.
        entries: Samples held now.
        prefetched: Samples read ahead of their step and kept.
        prefetch_hits: Batch reads served by a prefetched entry.
        mean_prefetch_lead_seconds: Mean time from a prefetched entry's arrival to its use.
        planned_batches: Batches recognised as a step of the plan.
    """

    hits: int
    misses: int
    requests: int
    bytes_fetched: int
    bytes_evicted: int
    evictions: int
    current_bytes: int
    peak_bytes: int
    max_bytes: int
    entries: int
    prefetched: int
    prefetch_hits: int
    mean_prefetch_lead_seconds: float
    planned_batches: int

    @property
    def hit_rate(self) -> float:
        """``hits / (hits + misses)``, 0 before any read."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class ReadBudget:
    """Bytes the cache could still take for samples first needed at a given step.

    A sample needed at step ``t`` can only displace entries needed after ``t``, so it fits
    when the entries needed by ``t``, plus what this read already took, leave room for it.
    Reads ahead and range growth stop at the first sample that would not fit: fetching it
    would cost bytes that the cache then drops.
    """

    __slots__ = ("_held", "_limit", "_reserved", "_times")

    def __init__(self, limit: int, uses: list[tuple[int, int]]) -> None:
        uses.sort()
        self._times = [when for when, _ in uses]
        self._held = list(itertools.accumulate(size for _, size in uses))
        self._limit = limit
        self._reserved = 0

    def _held_by(self, when: int) -> int:
        count = bisect.bisect_right(self._times, when)
        return self._held[count - 1] if count else 0

    def take(self, when: int, size: int) -> bool:
        """Reserve ``size`` bytes for a sample first needed at step ``when``, if they fit."""
        return self.take_all([(when, size)])

    def take_all(self, uses: list[tuple[int, int]]) -> bool:
        """Reserve room for every ``(when, size)``, or for none of them."""
        reserved = self._reserved
        for when, size in sorted(uses):
            reserved += size
            if self._held_by(when) + reserved > self._limit:
                return False
        self._reserved = reserved
        return True


def span_size(source: RangeSource, unit: int) -> int:
    _, start, end = source.span_of(unit)
    return end - start
