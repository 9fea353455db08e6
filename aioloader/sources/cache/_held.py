"""Where each sample is: the tiers, the read-ahead buffer, the reads on their way.

``Holdings`` is the cache's state, shared by its parts: admission (``_admission``), the
choice of read-ahead (``_readahead``), fetching (``_fetching``) and the read path
(``_reading``). It answers "is this sample held, and where", ranks entries by their next
use on the plans' clock, and books the bytes of reads on their way and of read-ahead.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from ._disk import DiskTier
from ._planner import NEVER
from ._plans import Plans
from ._policy import Sharing
from ._room import Displaced
from ._source import RangeSource
from ._statistics import Tally
from ._tiers import MemoryTier
from ._turns import Pending

__all__ = ("Holdings", "size_of")


class Holdings:
    """The cache's state: the tiers, the plans, the samples on their way and read ahead.

    Args:
        memory: The memory tier (its bound holds kept entries and read-ahead).
        disk: The disk tier, or None for memory only.
    """

    def __init__(self, memory: MemoryTier, disk: DiskTier | None) -> None:
        self.memory = memory
        self.disk = disk
        self.source: RangeSource | None = None
        self.versions: dict[str, str] = {}
        self.plans = Plans()  # one plan per stream the cache serves
        self.pending: dict[int, Pending] = {}
        self.pending_bytes = 0
        # read ahead, not used: (data, when, the stream it was read for)
        self.ahead: dict[int, tuple[bytes, float, Hashable]] = {}
        self.ahead_bytes = 0
        self.writing: dict[int, bytes] = {}  # on their way to disk: served from here
        self.displaced = Displaced(memory.max_bytes)  # kept entries read-ahead evicted
        self.tally = Tally()
        self.now = -1  # the latest step a batch read was matched to: when uses happen

    def bound_source(self) -> RangeSource:
        """The source served (``bind``); a clear error before it."""
        if self.source is None:
            raise RuntimeError("KnownFutureCache is not bound to a source (pass it as cache=)")
        return self.source

    def tiers(self) -> list[Any]:
        """The memory tier, then the disk tier if there is one."""
        return [self.memory] if self.disk is None else [self.memory, self.disk]

    def holds(self, unit: int) -> bool:
        """Whether ``unit``'s bytes are held (a tier, read ahead, or on their way to disk)."""
        return (
            unit in self.memory
            or unit in self.ahead
            or unit in self.writing
            or (self.disk is not None and unit in self.disk)
        )

    def is_free(self, unit: int) -> bool:
        """Neither held nor on its way."""
        return not self.holds(unit) and unit not in self.pending

    def is_passable(self, unit: int) -> bool:
        """Held or on its way: a run read behind the steps may pass over its bytes."""
        return self.holds(unit) or unit in self.pending

    def next_use(self, unit: int) -> int:
        """``unit``'s next use on the plans' clock (``NEVER``: none known)."""
        return self.plans.next_use(unit)

    def sharing(self, reader: Hashable) -> Sharing | None:
        """The streams sharing the tiers, for a read by stream ``reader`` (None: one)."""
        streams = self.plans.sharing
        return Sharing(reader, streams) if len(streams) > 1 else None

    def rank(self, unit: int, by: Hashable) -> None:
        """A batch of stream ``by`` uses ``unit`` now: rank it by its next use, as used now."""
        for tier in self.tiers():
            tier.rank(unit, self.next_use(unit), self.now, by)

    def rank_again(self, unit: int) -> None:
        """Rank ``unit`` by its next use where it is held (a plan learnt new steps)."""
        for tier in self.tiers():
            if unit in tier.order:
                tier.rank(unit, self.next_use(unit))

    def rerank(self, fresh: list[int], but: Any) -> list[int]:
        """Rank every entry again: ``fresh`` as used now, the samples of the plans but
        ``but`` by their next use, the rest as never used again. Returns the read-ahead
        that no plan needs any more (to drop)."""
        for tier in self.tiers():
            tier.order.rank_all(NEVER)
        for unit in fresh:  # as used now, by the stream that used it last
            for tier in self.tiers():
                tier.rank(unit, self.next_use(unit), self.now, tier.order.owner(unit))
        for unit in self.plans.units(but=but):
            self.rank_again(unit)
        return [unit for unit in self.ahead if self.next_use(unit) == NEVER]

    def from_memory(self, unit: int, by: Hashable) -> bytes | None:
        """``unit``'s bytes if memory, read-ahead or a disk write holds them."""
        data = self.memory.data.get(unit)
        if data is not None:
            self.rank(unit, by)
            return data
        held = self.ahead.get(unit)
        if held is not None:
            return held[0]
        return self.writing.get(unit)

    def claim(self, unit: int) -> Pending | None:
        """Mark ``unit`` on its way (None for an empty sample: nothing to read)."""
        size = size_of(self.bound_source(), unit)
        if size == 0:
            return None
        pending = self.pending[unit] = Pending(size)
        self.pending_bytes += size
        return pending

    def release(self, unit: int, pending: Pending) -> None:
        """The read of ``unit`` ended; waiters of a failed read see None and read it again."""
        if self.pending.get(unit) is pending:
            del self.pending[unit]
            self.pending_bytes -= pending.size
        if pending.reserved:  # read ahead, never arrived: its room goes back
            pending.reserved = False
            self.memory.unreserve(pending.size, pending.by)
        pending.finish()

    def hold_ahead(self, unit: int, data: bytes, by: Hashable) -> None:
        """Hold read-ahead for stream ``by`` until its step (its room stays reserved)."""
        self.ahead[unit] = (data, time.monotonic(), by)
        self.ahead_bytes += len(data)
        self.tally.bytes_waiting += len(data)
        self.tally.prefetched += 1

    def take_ahead(self, unit: int) -> bytes:
        """A step uses read-ahead: it leaves the buffer, and its room goes back."""
        data, arrived, owner = self.ahead.pop(unit)
        self.ahead_bytes -= len(data)
        self.memory.unreserve(len(data), owner)
        tally = self.tally
        tally.bytes_waiting -= len(data)
        tally.bytes_used += len(data)
        tally.prefetch_hits += 1
        tally.lead_total += time.monotonic() - arrived
        return data

    def drop_ahead(self, unit: int) -> None:
        """Read-ahead no plan needs: dropped, its room goes back."""
        data, _, owner = self.ahead.pop(unit)
        self.ahead_bytes -= len(data)
        self.memory.unreserve(len(data), owner)
        self.tally.bytes_waiting -= len(data)
        self.tally.bytes_dropped += len(data)

    def disk_path(self, unit: int, data: bytes) -> Path:
        """Where ``unit``'s entry file goes in the disk tier."""
        source, disk = self.bound_source(), self.disk
        assert disk is not None
        key, start, end = source.span_of(unit)
        return disk.path_for(unit, key, self.versions[key], start, end, data)


def size_of(source: RangeSource, unit: int) -> int:
    """Sample ``unit``'s size in bytes."""
    _, start, end = source.span_of(unit)
    return end - start
