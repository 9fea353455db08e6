"""A bounded byte cache that knows the future: prefetch from the plan, evict by next use.

The batch at global step ``g`` is a pure function of ``(seed, g)``, so once told the sampler,
the seed and the start step (``plan``), the cache knows every future read. It then

- recognises each batch it is asked for as step ``g`` of the plan (by its indices);
- reads what step ``g`` misses together with what steps ``g+1 .. g+lookahead_steps`` will
  need, coalesced into few large ranged GETs (samples inside a read range that a later step
  needs are kept too);
- evicts the entry whose next use is furthest in the future (Belady's policy, optimal for a
  known sequence), and does not keep an entry needed later than everything it holds.

``policy="lru"`` evicts the least recently used entry instead (for comparison). Without a
plan, or for a batch that is not in the plan, the cache still serves and fills, ordered by
recency. Entries are the byte spans of samples; ``current_bytes`` never exceeds
``max_bytes`` (bytes in flight are not entries). Memory only.
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal

import anyio

from ..core._check import as_int
from ..core._samplers import check_sampler
from ._cache_parts import CacheStatistics, RangeSource, ReadBudget, span_size
from ._coalesce import ByteRange, check_coalescing, coalesce
from ._concurrency import gather_ordered
from ._known_future import NEVER, KnownFuture

__all__ = ("CacheStatistics", "KnownFutureCache", "RangeSource")

Policy = Literal["belady", "lru"]


class _Pending:
    """A sample on its way: waiters get its bytes, or None when its read failed."""

    __slots__ = ("data", "event")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.data: bytes | None = None


class KnownFutureCache:
    """Bounded cache of sample bytes in front of a ``TarShards``, driven by the plan.

    >>> cache = KnownFutureCache(max_bytes=256 << 20, lookahead_steps=16)
    >>> # source = TarShards(keys, store, cache=cache)
    >>> # cache.plan(sampler, seed, start_step)   # before streaming from start_step

    Use it from one event loop at a time; one cache serves one source.

    Args:
        max_bytes: Most bytes of sample data held.
        lookahead_steps: Steps after the current one whose samples are read with it.
        policy: ``"belady"`` (evict the furthest next use) or ``"lru"``.
        horizon_steps: Steps of the future kept known, for next uses (default: one epoch
            of the planned sampler plus ``lookahead_steps``). Planning costs O(batch_size)
            per step of the horizon.
        coalesce_gap: Ranges of one object closer than this many bytes are read together.
        max_request_bytes: Largest coalesced read.
        fill_steps: A read grows over the neighbouring samples of its shard that steps up
            to this many ahead will read (default ``4 * lookahead_steps``): a shard that
            the next steps read densely, as under a block shuffle, costs one GET.
    """

    def __init__(
        self,
        max_bytes: int,
        *,
        lookahead_steps: int = 16,
        policy: Policy = "belady",
        horizon_steps: int | None = None,
        coalesce_gap: int = 256 << 10,
        max_request_bytes: int = 64 << 20,
        fill_steps: int | None = None,
    ) -> None:
        self.max_bytes = as_int("max_bytes", max_bytes)
        if self.max_bytes < 1:
            raise ValueError(f"max_bytes must be an integer >= 1 but got {self.max_bytes}")
        self.lookahead_steps = as_int("lookahead_steps", lookahead_steps)
        if self.lookahead_steps < 0:
            raise ValueError(
                f"lookahead_steps must be an integer >= 0 but got {self.lookahead_steps}"
            )
        if policy not in ("belady", "lru"):
            raise ValueError(f"policy must be 'belady' or 'lru' but got {policy!r}")
        self.policy: Policy = policy
        if horizon_steps is not None:
            horizon_steps = as_int("horizon_steps", horizon_steps)
            if horizon_steps < 1:
                raise ValueError(f"horizon_steps must be an integer >= 1 but got {horizon_steps}")
        self.horizon_steps = horizon_steps
        if fill_steps is not None:
            fill_steps = as_int("fill_steps", fill_steps)
            if fill_steps < 0:
                raise ValueError(f"fill_steps must be an integer >= 0 but got {fill_steps}")
        self.fill_steps = 4 * self.lookahead_steps if fill_steps is None else fill_steps
        self.coalesce_gap, self.max_request_bytes = check_coalescing(
            coalesce_gap, max_request_bytes
        )
        self._source: RangeSource | None = None
        self._entries: dict[int, bytes] = {}
        self._recency: OrderedDict[int, None] = OrderedDict()
        self._pending: dict[int, _Pending] = {}
        self._arrived: dict[int, float] = {}
        self._heap: list[tuple[int, int, int]] = []
        self._heap_seq: dict[int, int] = {}
        self._counter = 0
        self._bytes = self._peak = 0
        self._hits = self._misses = self._requests = self._fetched = 0
        self._evicted_bytes = self._evictions = 0
        self._prefetched = self._prefetch_hits = self._matched = 0
        self._lead_total = 0.0
        self._future: KnownFuture | None = None

    # -- the plan ---------------------------------------------------------------------

    def bind(self, source: RangeSource) -> None:
        """Serve ``source`` (done by ``TarShards(..., cache=cache)``); one source per cache."""
        if self._source is not None and self._source is not source:
            raise ValueError("this KnownFutureCache already serves another source")
        self._source = source

    def plan(self, sampler: Any, seed: int, start_step: int = 0) -> None:
        """Tell the cache that batches will be read in the order of ``sampler`` from here.

        Call it before streaming from ``start_step`` (and again after a resume elsewhere);
        entries already held are kept. ``sampler`` is the one the loader uses (a
        ``RankSlice`` on a rank), with the loader's ``seed``.
        """
        check_sampler(sampler)
        horizon = (
            self.horizon_steps
            if self.horizon_steps is not None
            else int(sampler.steps_per_epoch) + self.lookahead_steps
        )
        self._future = None
        self._future = KnownFuture(
            sampler, seed, start_step, horizon, max(256, 4 * self.lookahead_steps), self._changed
        )
        self._rebuild_heap()

    def offer(self, index: int, data: bytes) -> bool:
        """Keep sample ``index``'s bytes if there is room (no eviction); False when full.

        ``TarShards`` offers what indexing a shard read anyway, so that a first epoch after
        building the index on the fly does not read the same bytes again.
        """
        if index in self._entries or self._bytes + len(data) > self.max_bytes:
            return index in self._entries
        return self._admit(index, data, optional=True)

    def _changed(self, unit: int) -> None:
        if unit in self._entries:
            self._push(unit)

    def _next_use(self, unit: int) -> int:
        return NEVER if self._future is None else self._future.next_use(unit)

    # -- entries ----------------------------------------------------------------------

    def _push(self, unit: int) -> None:
        self._counter += 1
        self._heap_seq[unit] = self._counter
        heapq.heappush(self._heap, (-self._next_use(unit), self._counter, unit))
        if len(self._heap) > 4 * len(self._entries) + 1024:
            self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        self._heap = []
        self._heap_seq = {}
        for unit in self._recency:  # oldest first: ties evict the least recently used
            self._counter += 1
            self._heap_seq[unit] = self._counter
            self._heap.append((-self._next_use(unit), self._counter, unit))
        heapq.heapify(self._heap)

    def _furthest(self) -> tuple[int, int] | None:
        while self._heap:
            negative, seq, unit = self._heap[0]
            if unit in self._entries and self._heap_seq.get(unit) == seq:
                return unit, -negative
            heapq.heappop(self._heap)
        return None

    def _evict(self, unit: int) -> None:
        data = self._entries.pop(unit)
        self._recency.pop(unit, None)
        self._heap_seq.pop(unit, None)
        self._arrived.pop(unit, None)
        self._bytes -= len(data)
        self._evicted_bytes += len(data)
        self._evictions += 1

    def _admit(self, unit: int, data: bytes, *, optional: bool) -> bool:
        """Keep ``data``, evicting as the policy says; False when it is not worth a place."""
        if unit in self._entries:
            return True
        size = len(data)
        if size > self.max_bytes:
            return False
        if self.policy == "belady" and self._future is not None:
            wanted = self._next_use(unit)
            while self._bytes + size > self.max_bytes:
                victim = self._furthest()
                if victim is None or victim[1] <= wanted:
                    return False
                self._evict(victim[0])
        else:
            if optional and self._bytes + size > self.max_bytes:
                return False
            while self._bytes + size > self.max_bytes:
                self._evict(next(iter(self._recency)))
        self._entries[unit] = data
        self._recency[unit] = None
        self._bytes += size
        self._peak = max(self._peak, self._bytes)
        self._push(unit)
        return True

    # -- reading ----------------------------------------------------------------------

    async def read(self, indices: Sequence[int]) -> list[bytes]:
        """The bytes of every sample of one batch, in the order of ``indices``."""
        source = self._source
        if source is None:
            raise RuntimeError("KnownFutureCache is not bound to a source (pass it as cache=)")
        future = self._future
        step = None if future is None else future.match(indices)
        if future is not None and step is not None:
            self._matched += 1
            future.consume(step)
        found: dict[int, bytes] = {}
        waits: dict[int, _Pending] = {}
        need: list[int] = []
        now = time.monotonic()
        for unit in dict.fromkeys(int(i) for i in indices):
            data = self._entries.get(unit)
            if data is not None:
                self._hits += 1
                self._recency.move_to_end(unit)
                arrived = self._arrived.pop(unit, None)
                if arrived is not None:
                    self._prefetch_hits += 1
                    self._lead_total += now - arrived
                found[unit] = data
            elif unit in self._pending:
                self._hits += 1
                waits[unit] = self._pending[unit]
            else:
                self._misses += 1
                need.append(unit)
        budget = None
        ahead: list[int] = []
        if future is not None and step is not None:
            budget = ReadBudget(
                self.max_bytes, [(self._next_use(u), len(d)) for u, d in self._entries.items()]
            )
            ahead = self._ahead_of(source, future, step, budget, found, waits, need)
        if need or ahead:
            await self._fetch(source, need, ahead, found, step, budget)
        for unit, pending in waits.items():
            await pending.event.wait()
            if pending.data is None:  # the read that carried it failed: read it here
                await self._fetch(source, [unit], [], found, None, None)
            else:
                found[unit] = pending.data
        return [found[int(i)] for i in indices]

    def _ahead_of(
        self,
        source: RangeSource,
        future: KnownFuture,
        step: int,
        budget: ReadBudget,
        found: dict[int, bytes],
        waits: dict[int, _Pending],
        need: list[int],
    ) -> list[int]:
        """Samples to read with step ``step``'s: whole runs of shards, soonest needed first.

        Each sample the next ``lookahead_steps`` steps need brings the run of its shard's
        neighbours needed within ``fill_steps`` steps (one range read). A run that does not
        fit the budget waits for a later step, unless the next two steps need its sample.
        """
        chosen: dict[int, None] = {}
        busy = set(need) | set(found) | set(waits)

        def free(unit: int) -> bool:
            return unit not in self._entries and unit not in self._pending and unit not in busy

        fill_limit = step + max(self.fill_steps, self.lookahead_steps)
        last = min(step + 1 + self.lookahead_steps, future.planned_until)
        for later in range(step + 1, last):
            for unit in future.step_indices(later):
                if not free(unit) or unit in chosen:
                    continue
                run = self._run(source, unit, fill_limit, free, chosen)
                uses = [(self._next_use(u), span_size(source, u)) for u in run]
                if not budget.take_all(uses):
                    if later > step + 2:
                        return list(chosen)  # the rest waits until the cache has room
                    run = [unit]
                    if not budget.take_all([(self._next_use(unit), span_size(source, unit))]):
                        continue
                for member in run:
                    chosen[member] = None
        return list(chosen)

    def _run(
        self,
        source: RangeSource,
        unit: int,
        limit: int,
        free: Any,
        chosen: dict[int, None],
    ) -> list[int]:
        """``unit`` and its neighbours in its shard that are free and needed by ``limit``."""
        key, start, end = source.span_of(unit)

        def joins(other: int) -> tuple[int, int] | None:
            if not 0 <= other < len(source) or not free(other) or other in chosen:
                return None
            other_key, begin, stop = source.span_of(other)
            if other_key != key or self._next_use(other) > limit:
                return None
            return begin, stop

        low = high = unit
        while (span := joins(low - 1)) is not None and end - span[0] <= self.max_request_bytes:
            start, low = span[0], low - 1
        while (span := joins(high + 1)) is not None and span[1] - start <= self.max_request_bytes:
            end, high = span[1], high + 1
        return list(range(low, high + 1))

    async def _fetch(
        self,
        source: RangeSource,
        need: list[int],
        ahead: list[int],
        found: dict[int, bytes],
        step: int | None,
        budget: ReadBudget | None,
    ) -> None:
        demanded = set(need)
        spans: list[ByteRange] = []
        owned: dict[int, _Pending] = {}
        for unit in need + ahead:
            key, start, end = source.span_of(unit)
            if start == end:
                if unit in demanded:
                    found[unit] = b""
                continue
            owned[unit] = self._pending[unit] = _Pending()
            spans.append((key, start, end))
        ranges = coalesce(spans, self.coalesce_gap, self.max_request_bytes)
        if step is not None and budget is not None and self.fill_steps:
            limit = step + self.fill_steps
            grown = [self._grow(source, byte_range, limit, budget) for byte_range in ranges]
            ranges = coalesce(grown, self.coalesce_gap, self.max_request_bytes)

        async def read_range(byte_range: ByteRange) -> None:
            key, start, end = byte_range
            data = await source.read_range(key, start, end)
            self._requests += 1
            self._fetched += len(data)
            self._deliver(source, byte_range, data, owned, demanded, found, arrived)

        arrived: list[tuple[int, bytes]] = []
        try:
            await gather_ordered(read_range, ranges)
        finally:
            self._keep(arrived, owned, demanded)
            for unit, pending in owned.items():
                if self._pending.get(unit) is pending:
                    del self._pending[unit]
                pending.event.set()  # waiters of a failed read see data None and retry

    def _grow(
        self, source: RangeSource, byte_range: ByteRange, limit: int, budget: ReadBudget
    ) -> ByteRange:
        """``byte_range`` grown over neighbours of its shard read by steps up to ``limit``."""
        key, start, end = byte_range
        inside = source.indices_within(key, start, end)
        if not inside:
            return byte_range

        def wanted(unit: int) -> tuple[int, int] | None:
            if not 0 <= unit < len(source) or unit in self._entries or unit in self._pending:
                return None
            unit_key, begin, stop = source.span_of(unit)
            when = self._next_use(unit)
            if unit_key != key or when > limit or not budget.take(when, stop - begin):
                return None
            return begin, stop

        below = inside.start - 1
        while (span := wanted(below)) is not None and end - span[0] <= self.max_request_bytes:
            start, below = span[0], below - 1
        above = inside.stop
        while (span := wanted(above)) is not None and span[1] - start <= self.max_request_bytes:
            end, above = span[1], above + 1
        return key, start, end

    def _deliver(
        self,
        source: RangeSource,
        byte_range: ByteRange,
        data: bytes,
        owned: dict[int, _Pending],
        demanded: set[int],
        found: dict[int, bytes],
        arrived: list[tuple[int, bytes]],
    ) -> None:
        """Hand a range's samples to their readers; they are offered to the cache later."""
        key, start, end = byte_range
        for unit in source.indices_within(key, start, end):
            _, begin, stop = source.span_of(unit)
            if begin == stop:
                continue
            piece = data[begin - start : stop - start]
            pending = owned.get(unit)
            if pending is not None:
                pending.data = piece
                pending.event.set()
                if unit in demanded:
                    found[unit] = piece
            arrived.append((unit, piece))

    def _keep(
        self, arrived: list[tuple[int, bytes]], owned: dict[int, _Pending], demanded: set[int]
    ) -> None:
        """Offer what a read brought to the cache: soonest needed first, whatever the timing."""
        now = time.monotonic()
        arrived.sort(key=lambda item: (self._next_use(item[0]), item[0]))
        for unit, piece in arrived:
            if unit in self._entries:
                continue
            if unit in owned:
                kept = self._admit(unit, piece, optional=False)
            elif unit in self._pending:
                continue  # another read carries it and will offer it
            else:
                kept = self._admit(unit, piece, optional=True)
            if kept and unit not in demanded:
                self._prefetched += 1
                self._arrived[unit] = now

    def statistics(self) -> CacheStatistics:
        """A snapshot of the counters."""
        lead = self._lead_total / self._prefetch_hits if self._prefetch_hits else 0.0
        return CacheStatistics(
            hits=self._hits,
            misses=self._misses,
            requests=self._requests,
            bytes_fetched=self._fetched,
            bytes_evicted=self._evicted_bytes,
            evictions=self._evictions,
            current_bytes=self._bytes,
            peak_bytes=self._peak,
            max_bytes=self.max_bytes,
            entries=len(self._entries),
            prefetched=self._prefetched,
            prefetch_hits=self._prefetch_hits,
            mean_prefetch_lead_seconds=lead,
            planned_batches=self._matched,
        )

    def __repr__(self) -> str:
        return (
            f"KnownFutureCache(max_bytes={self.max_bytes}, policy={self.policy!r}, "
            f"lookahead_steps={self.lookahead_steps})"
        )
