"""The cache's counters: a frozen snapshot (``CacheStatistics``) and the live tally."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ("CacheStatistics", "Tally")


@dataclass(frozen=True)
class CacheStatistics:
    """Counters of a ``KnownFutureCache``.

    Bytes add up: ``bytes_fetched == bytes_used + bytes_between + bytes_dropped +
    bytes_waiting`` (``bytes_unused`` is ``bytes_between + bytes_dropped``). Every fetched
    sample byte is used once (by the batch that asked for it, or the later one it was read
    ahead for), dropped unused, or still held waiting for its step.

    Attributes:
        hits: Samples a batch found in a tier (or already on their way).
        misses: Samples a batch had to fetch.
        memory_hits: Hits served from memory.
        disk_hits: Hits served from the disk tier.
        requests: Ranged reads the cache issued.
        bytes_fetched: Bytes those reads returned.
        bytes_used: Fetched bytes that a batch used (counted once per fetch).
        bytes_unused: Fetched bytes never used: ``bytes_between + bytes_dropped``.
        bytes_between: Bytes inside range reads that no batch used from them: tar headers
            between samples, and samples held that a run passed over.
        bytes_dropped: Samples read ahead and dropped unused: their plan was replaced
            (a new stream) or another read brought them first. Read-ahead holds its room
            until use, so a plan that runs its course drops nothing.
        bytes_waiting: Fetched bytes held in the read-ahead buffer, not used yet.
        bytes_evicted: Bytes evicted from memory (moved to disk or dropped) plus from disk.
        memory_bytes_evicted: Bytes evicted from the memory tier.
        disk_bytes_evicted: Bytes evicted from the disk tier.
        evictions: Entries evicted (either tier).
        current_bytes: Bytes held in memory now (never above ``max_bytes``).
        peak_bytes: Most bytes ever held in memory.
        max_bytes: The memory tier's bound.
        readahead_bytes: Bytes in the read-ahead buffer now (never above its bound).
        disk_bytes: Bytes of entry files now (never above ``disk_max_bytes``).
        disk_peak_bytes: Most bytes of entry files ever.
        disk_max_bytes: The disk tier's bound (0 without one).
        disk_errors: I/O errors of the disk tier (the first one warns and degrades the
            cache to memory only; the batches are not affected).
        disk_degraded: Whether an I/O error turned the disk tier off: it takes no new
            entries (those on disk are still read, each checked).
        entries: Samples held now (in either tier or both).
        prefetched: Samples read ahead of their step and kept.
        prefetch_hits: Batch reads served by an entry read ahead for them.
        mean_prefetch_lead_seconds: Mean time from a read-ahead entry's arrival to its use.
        planned_batches: Batches recognised as a step of the plan.
        planner_bytes: Bytes of the planners' arrays now.
        planned_streams: Streams whose plans the cache holds now (one per stream that
            started and has not ended).
    """

    hits: int
    misses: int
    memory_hits: int
    disk_hits: int
    requests: int
    bytes_fetched: int
    bytes_used: int
    bytes_unused: int
    bytes_between: int
    bytes_dropped: int
    bytes_waiting: int
    bytes_evicted: int
    memory_bytes_evicted: int
    disk_bytes_evicted: int
    evictions: int
    current_bytes: int
    peak_bytes: int
    max_bytes: int
    readahead_bytes: int
    disk_bytes: int
    disk_peak_bytes: int
    disk_max_bytes: int
    disk_errors: int
    disk_degraded: bool
    entries: int
    prefetched: int
    prefetch_hits: int
    mean_prefetch_lead_seconds: float
    planned_batches: int
    planner_bytes: int
    planned_streams: int = 0

    @property
    def hit_rate(self) -> float:
        """``hits / (hits + misses)``, 0 before any read."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class Tally:
    """The live counters behind ``CacheStatistics``, named as it names them (the tiers count
    their own bytes; ``lead_total`` sums the prefetch leads that the mean is taken of)."""

    COUNTED = (
        *("hits", "misses", "memory_hits", "disk_hits", "requests", "bytes_fetched"),
        *("bytes_used", "bytes_between", "bytes_dropped", "bytes_waiting"),
        *("prefetched", "prefetch_hits"),
        "planned_batches",
        "disk_errors",
    )
    """The counters that ``CacheStatistics`` reports as they are."""

    def __init__(self) -> None:
        self.hits = self.misses = self.memory_hits = self.disk_hits = self.requests = 0
        self.bytes_fetched = self.bytes_used = self.bytes_waiting = 0
        self.bytes_between = self.bytes_dropped = 0
        self.prefetched = self.prefetch_hits = self.planned_batches = 0
        self.disk_errors = 0
        self.lead_total = 0.0

    def counts(self) -> dict[str, int]:
        """The ``COUNTED`` counters by name, now."""
        counts = {name: getattr(self, name) for name in self.COUNTED}
        counts["bytes_unused"] = self.bytes_between + self.bytes_dropped
        return counts
