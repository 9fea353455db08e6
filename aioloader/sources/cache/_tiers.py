"""The bookkeeping every tier shares (bytes held, bound, eviction order) and the memory tier."""

from __future__ import annotations

from collections.abc import Hashable

from ._policy import EvictionOrder, Policy, Sharing

__all__ = ("MemoryTier", "TierBook")


class TierBook:
    """Sizes of a tier's entries against its bound, and their eviction order.

    Entries are ranked for eviction (``order``) once ``rank`` is called. ``reserved``
    bytes count against the bound without being entries: the memory tier reserves there
    what is read ahead until its step uses it, so read-ahead shares the bound and can never
    be evicted before its use. ``held`` counts, per stream, the bytes of the entries it
    used last and of the room reserved for it (None: no stream), for ``room_for``'s shares.
    """

    def __init__(self, max_bytes: int, policy: Policy, span: int = 1) -> None:
        self.max_bytes = max_bytes
        self.sizes: dict[int, int] = {}
        self.order = EvictionOrder(policy, span)
        self.bytes = self.peak = self.evicted_bytes = self.evictions = 0
        self.reserved = 0
        self.held: dict[Hashable, int] = {}

    def __contains__(self, unit: int) -> bool:
        return unit in self.sizes

    def __len__(self) -> int:
        return len(self.sizes)

    def fits(self, size: int) -> bool:
        """Whether ``size`` more bytes fit without evicting anything."""
        return self.bytes + self.reserved + size <= self.max_bytes

    def room_for(
        self,
        size: int,
        wanted: int,
        used_since: int | None = None,
        sharing: Sharing | None = None,
        rival: int | None = None,
    ) -> list[int] | None:
        """Victims to evict so that ``size`` more bytes fit, each needed after ``wanted``
        (see ``EvictionOrder.pop_victims`` for ``used_since``). With ``sharing``, each
        other stream keeps its entries beyond the plans up to its share of the bound.
        ``rival``: the sample that wants the room (see ``EvictionOrder.pop_victims``)."""
        if size > self.max_bytes:
            return None
        over = self.bytes + self.reserved + size - self.max_bytes
        if over <= 0:
            return []
        if sharing is None or len(sharing.streams) < 2:
            return self.order.pop_victims(over, wanted, self.sizes, used_since, rival=rival)
        share = self.max_bytes // len(sharing.streams)
        others = {
            stream: self.held.get(stream, 0) - share
            for stream in sharing.streams
            if stream != sharing.reader
        }
        under = 0 if sharing.reader is None else share - self.held.get(sharing.reader, 0) - size
        return self.order.pop_victims(over, wanted, self.sizes, used_since, others, under, rival)

    def add(self, unit: int, size: int) -> None:
        """Count ``unit``'s ``size`` bytes (call ``room_for`` first)."""
        self.sizes[unit] = size
        self.bytes += size
        self._hold(None, size)
        self._held_changed()

    def reserve(self, size: int, by: Hashable = None) -> None:
        """Count ``size`` bytes against the bound before they arrive, for stream ``by``
        (call ``room_for`` first)."""
        self.reserved += size
        self._hold(by, size)
        self._held_changed()

    def unreserve(self, size: int, by: Hashable = None) -> None:
        """Give back ``size`` bytes reserved for ``by`` (used, dropped, or their read failed)."""
        self.reserved -= size
        self._hold(by, -size)
        assert self.reserved >= 0, self.reserved

    def _held_changed(self) -> None:
        held = self.bytes + self.reserved
        self.peak = max(self.peak, held)
        assert held <= self.max_bytes, (self.bytes, self.reserved, self.max_bytes)

    def rank(
        self, unit: int, next_use: int, used_at: int | None = None, by: Hashable = None
    ) -> None:
        """Make ``unit`` evictable, ranked by ``next_use`` (and ``used_at``: the step that
        used it now, if one did, for stream ``by``)."""
        size = self.sizes.get(unit)
        if size is not None:
            if used_at is not None:
                self._hold(self.order.used(unit, used_at, by), -size)
                self._hold(by, size)
            self.order.push(unit, next_use)

    def remove(self, unit: int, *, evicted: bool) -> int:
        """Forget ``unit``; returns its size."""
        size = self.sizes.pop(unit)
        self._hold(self.order.forget(unit), -size)
        self.bytes -= size
        if evicted:
            self.evicted_bytes += size
            self.evictions += 1
        return size

    def _hold(self, stream: Hashable, size: int) -> None:
        held = self.held[stream] = self.held.get(stream, 0) + size
        if not held:
            del self.held[stream]


class MemoryTier(TierBook):
    """Entries held as ``bytes`` in this process."""

    def __init__(self, max_bytes: int, policy: Policy, span: int = 1) -> None:
        super().__init__(max_bytes, policy, span)
        self.data: dict[int, bytes] = {}

    def put(self, unit: int, data: bytes) -> None:
        """Hold ``data`` (call ``room_for`` and evict its victims first)."""
        self.add(unit, len(data))
        self.data[unit] = data

    def take(self, unit: int, *, evicted: bool) -> bytes:
        """Remove ``unit`` and return its bytes."""
        self.remove(unit, evicted=evicted)
        return self.data.pop(unit)
