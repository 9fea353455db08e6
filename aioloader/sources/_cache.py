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
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import anyio

from ..core._check import as_int, u64
from ._coalesce import ByteRange, check_coalescing, coalesce
from ._concurrency import gather_ordered

__all__ = ("CacheStatistics", "KnownFutureCache", "RangeSource")

Policy = Literal["belady", "lru"]
NEVER = 1 << 62
"""Next use of an entry that the known future does not read again."""


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
    """

    def __init__(
        self,
        max_bytes: int,
        *,
        lookahead_steps: int = 16,
        policy: Policy = "belady",
        horizon_steps: int | None = None,
        coalesce_gap: int = 1 << 20,
        max_request_bytes: int = 64 << 20,
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
        self._horizon = 0
        self._reset_plan(None, 0, 0)

    # -- the plan ---------------------------------------------------------------------

    def _reset_plan(self, sampler: Any, seed: int, start_step: int) -> None:
        self._sampler = sampler
        self._seed = seed
        self._cursor = self._planned_until = start_step
        self._consumed: set[int] = set()
        self._future: dict[int, deque[int]] = {}
        self._by_hash: dict[int, list[int]] = {}
        self._memo: dict[int, list[int]] = {}

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
        if not callable(getattr(sampler, "indices", None)) or not hasattr(
            sampler, "steps_per_epoch"
        ):
            raise TypeError(
                "sampler must have steps_per_epoch and indices(seed, epoch, step) "
                f"but got {type(sampler).__name__}"
            )
        if sampler.steps_per_epoch < 1:
            raise ValueError(f"sampler has steps_per_epoch = {sampler.steps_per_epoch}")
        self._reset_plan(sampler, u64("seed", seed), u64("start_step", start_step))
        self._horizon = (
            self.horizon_steps
            if self.horizon_steps is not None
            else int(sampler.steps_per_epoch) + self.lookahead_steps
        )
        self._rebuild_heap()
        self._extend()

    def _step_indices(self, step: int) -> list[int]:
        memo = self._memo.get(step)
        if memo is None:
            epoch, in_epoch = divmod(step, int(self._sampler.steps_per_epoch))
            memo = [int(i) for i in self._sampler.indices(self._seed, epoch, in_epoch).tolist()]
            if len(self._memo) > 4 * self._slack():
                self._memo.clear()
            self._memo[step] = memo
        return memo

    def _slack(self) -> int:
        return max(256, 4 * self.lookahead_steps)

    def _extend(self) -> None:
        target = self._cursor + self._horizon
        while self._planned_until < target:
            step = self._planned_until
            indices = self._step_indices(step)
            for unit in dict.fromkeys(indices):
                uses = self._future.get(unit)
                if uses is None:
                    uses = self._future[unit] = deque()
                    if unit in self._entries:
                        uses.append(step)
                        self._push(unit)
                        continue
                uses.append(step)
            self._by_hash.setdefault(hash(tuple(indices)), []).append(step)
            self._planned_until += 1
            self._memo.pop(step, None)

    def _match(self, indices: Sequence[int]) -> int | None:
        steps = self._by_hash.get(hash(tuple(indices)))
        if not steps:
            return None
        wanted = [int(i) for i in indices]
        for step in steps:
            if step not in self._consumed and self._step_indices(step) == wanted:
                return step
        return None

    def _consume(self, step: int) -> None:
        self._retire(step)
        self._consumed.add(step)
        for stale in range(self._cursor, step - self._slack()):
            if stale not in self._consumed:  # never asked for: it will not come any more
                self._retire(stale)
                self._consumed.add(stale)
        while self._cursor in self._consumed:
            self._consumed.discard(self._cursor)
            self._cursor += 1
        self._extend()

    def _retire(self, step: int) -> None:
        """Forget the uses of ``step`` (it was read, or will never be)."""
        indices = self._step_indices(step)
        for unit in dict.fromkeys(indices):
            uses = self._future.get(unit)
            if uses is not None and step in uses:
                uses.remove(step)
                if not uses:
                    del self._future[unit]
                if unit in self._entries:
                    self._push(unit)
        steps = self._by_hash.get(hash(tuple(indices)))
        if steps is not None and step in steps:
            steps.remove(step)
            if not steps:
                del self._by_hash[hash(tuple(indices))]
        self._memo.pop(step, None)

    def _next_use(self, unit: int) -> int:
        uses = self._future.get(unit)
        return uses[0] if uses else NEVER

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
        if self.policy == "belady" and self._sampler is not None:
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
        step = self._match(indices) if self._sampler is not None else None
        if step is not None:
            self._matched += 1
            self._consume(step)
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
        ahead = self._ahead_of(step, found, waits, need) if step is not None else []
        if need or ahead:
            await self._fetch(source, need, ahead, found)
        for unit, pending in waits.items():
            await pending.event.wait()
            if pending.data is None:  # the read that carried it failed: read it here
                await self._fetch(source, [unit], [], found)
            else:
                found[unit] = pending.data
        return [found[int(i)] for i in indices]

    def _ahead_of(
        self, step: int, found: dict[int, bytes], waits: dict[int, _Pending], need: list[int]
    ) -> list[int]:
        chosen: dict[int, None] = {}
        taken = set(need)
        last = min(step + 1 + self.lookahead_steps, self._planned_until)
        for later in range(step + 1, last):
            for unit in self._step_indices(later):
                if (
                    unit not in self._entries
                    and unit not in self._pending
                    and unit not in found
                    and unit not in waits
                    and unit not in taken
                ):
                    chosen[unit] = None
        return list(chosen)

    async def _fetch(
        self, source: RangeSource, need: list[int], ahead: list[int], found: dict[int, bytes]
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

        async def read_range(byte_range: ByteRange) -> None:
            key, start, end = byte_range
            data = await source.read_range(key, start, end)
            self._requests += 1
            self._fetched += len(data)
            self._deliver(source, byte_range, data, owned, demanded, found)

        try:
            await gather_ordered(read_range, ranges)
        finally:
            for unit, pending in owned.items():
                if self._pending.get(unit) is pending:
                    del self._pending[unit]
                pending.event.set()  # waiters of a failed read see data None and retry

    def _deliver(
        self,
        source: RangeSource,
        byte_range: ByteRange,
        data: bytes,
        owned: dict[int, _Pending],
        demanded: set[int],
        found: dict[int, bytes],
    ) -> None:
        key, start, end = byte_range
        pieces = []
        for unit in source.indices_within(key, start, end):
            _, begin, stop = source.span_of(unit)
            if begin == stop:
                continue
            pieces.append((self._next_use(unit), unit, data[begin - start : stop - start]))
        pieces.sort(key=lambda piece: piece[0])  # the soonest needed get a place first
        now = time.monotonic()
        for _, unit, piece in pieces:
            pending = owned.get(unit)
            if pending is not None:
                pending.data = piece
                pending.event.set()
                if unit in demanded:
                    found[unit] = piece
                    self._admit(unit, piece, optional=False)
                elif self._admit(unit, piece, optional=False):
                    self._prefetched += 1
                    self._arrived[unit] = now
            elif (
                unit not in self._entries
                and unit not in self._pending
                and self._admit(unit, piece, optional=True)
            ):
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
