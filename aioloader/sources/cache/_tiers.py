"""The bookkeeping every tier shares (bytes held, bound, eviction order) and the memory tier."""

from __future__ import annotations

from ._policy import EvictionOrder, Policy

__all__ = ("MemoryTier", "TierBook")


class TierBook:
    """Sizes of a tier's entries against its bound, and their eviction order.

    Entries read ahead and not used yet are held but not ranked (``order``): they cannot
    be chosen for eviction until ``rank`` is called after their use.
    """

    def __init__(self, max_bytes: int, policy: Policy) -> None:
        self.max_bytes = max_bytes
        self.sizes: dict[int, int] = {}
        self.order = EvictionOrder(policy)
        self.bytes = self.peak = self.evicted_bytes = self.evictions = 0

    def __contains__(self, unit: int) -> bool:
        return unit in self.sizes

    def __len__(self) -> int:
        return len(self.sizes)

    def fits(self, size: int) -> bool:
        """Whether ``size`` more bytes fit without evicting anything."""
        return self.bytes + size <= self.max_bytes

    def room_for(self, size: int, wanted: int) -> list[int] | None:
        """Victims to evict so that ``size`` more bytes fit, each needed after ``wanted``."""
        if size > self.max_bytes:
            return None
        over = self.bytes + size - self.max_bytes
        if over <= 0:
            return []
        return self.order.pop_victims(over, wanted, self.sizes)

    def add(self, unit: int, size: int) -> None:
        """Count ``unit``'s ``size`` bytes (call ``room_for`` first)."""
        self.sizes[unit] = size
        self.bytes += size
        self.peak = max(self.peak, self.bytes)
        assert self.bytes <= self.max_bytes, (self.bytes, self.max_bytes)

    def rank(self, unit: int, next_use: int) -> None:
        """Make ``unit`` evictable, ranked by ``next_use``."""
        if unit in self.sizes:
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
