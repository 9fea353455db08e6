"""The bookkeeping every tier shares (bytes held, bound, eviction order) and the memory tier."""

from __future__ import annotations

from ._policy import EvictionOrder, Policy

__all__ = ("MemoryTier", "TierBook")


class TierBook:
    """Sizes of a tier's entries against its bound, and their eviction order.

    Entries are ranked for eviction (``order``) once ``rank`` is called. ``reserved``
    bytes count against the bound without being entries: the memory tier reserves there
    what is read ahead until its step uses it, so read-ahead shares the bound and can never
    be evicted before its use.
    """

    def __init__(self, max_bytes: int, policy: Policy) -> None:
        self.max_bytes = max_bytes
        self.sizes: dict[int, int] = {}
        self.order = EvictionOrder(policy)
        self.bytes = self.peak = self.evicted_bytes = self.evictions = 0
        self.reserved = 0

    def __contains__(self, unit: int) -> bool:
        return unit in self.sizes

    def __len__(self) -> int:
        return len(self.sizes)

    def fits(self, size: int) -> bool:
        """Whether ``size`` more bytes fit without evicting anything."""
        return self.bytes + self.reserved + size <= self.max_bytes

    def room_for(self, size: int, wanted: int, used_since: int | None = None) -> list[int] | None:
        """Victims to evict so that ``size`` more bytes fit, each needed after ``wanted``
        (see ``EvictionOrder.pop_victims`` for ``used_since``)."""
        if size > self.max_bytes:
            return None
        over = self.bytes + self.reserved + size - self.max_bytes
        if over <= 0:
            return []
        return self.order.pop_victims(over, wanted, self.sizes, used_since)

    def add(self, unit: int, size: int) -> None:
        """Count ``unit``'s ``size`` bytes (call ``room_for`` first)."""
        self.sizes[unit] = size
        self.bytes += size
        self._held_changed()

    def reserve(self, size: int) -> None:
        """Count ``size`` bytes against the bound before they arrive (call ``room_for`` first)."""
        self.reserved += size
        self._held_changed()

    def unreserve(self, size: int) -> None:
        """Give back ``size`` reserved bytes (used, dropped, or their read failed)."""
        self.reserved -= size
        assert self.reserved >= 0, self.reserved

    def _held_changed(self) -> None:
        held = self.bytes + self.reserved
        self.peak = max(self.peak, held)
        assert held <= self.max_bytes, (self.bytes, self.reserved, self.max_bytes)

    def rank(self, unit: int, next_use: int, used_at: int | None = None) -> None:
        """Make ``unit`` evictable, ranked by ``next_use`` (and ``used_at``: the step that
        used it now, if one did)."""
        if unit in self.sizes:
            if used_at is not None:
                self.order.used(unit, used_at)
            self.order.push(unit, next_use)

    def remove(self, unit: int, *, evicted: bool) -> int:
        """Forget ``unit``; returns its size."""
        size = self.sizes.pop(unit)
        self.order.forget(unit)
        self.bytes -= size
        if evicted:
            self.evicted_bytes += size
            self.evictions += 1
        return size


class MemoryTier(TierBook):
    """Entries held as ``bytes`` in this process."""

    def __init__(self, max_bytes: int, policy: Policy) -> None:
        super().__init__(max_bytes, policy)
        self.data: dict[int, bytes] = {}

    def put(self, unit: int, data: bytes) -> None:
        """Hold ``data`` (call ``room_for`` and evict its victims first)."""
        self.add(unit, len(data))
        self.data[unit] = data

    def take(self, unit: int, *, evicted: bool) -> bytes:
        """Remove ``unit`` and return its bytes."""
        self.remove(unit, evicted=evicted)
        return self.data.pop(unit)
