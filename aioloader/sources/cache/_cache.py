"""A bounded two-tier byte cache that knows the future: it reads by the plan, evicts by next use.

The batch at global step ``g`` is a pure function of ``(seed, g)``, so once told the sampler,
the seed and the start step (``plan``; the loader does it when a stream starts), the cache
knows every future read. A ``HorizonPlanner`` keeps a few windows of it as numpy arrays,
extended in worker threads as the reads move on; each stream (training, evaluation) keeps
its own, on one clock (``_plans``). Each stream's next pass counts as known too (a stream
that ended is expected back), so what an epoch keeps is what the next one reads first; an
entry no plan reads again belongs to the stream that used it last, which keeps its fair
share of the room against the others (``_policy``). For the batch at step ``g`` the cache

- fetches what the batch misses, grown over the run of its shard's neighbours that the
  horizon needs, and reads ahead what steps ``g+1 .. g+lookahead_steps`` need, each grown
  likewise; runs of one shard with only tar headers (or a few samples held) between them
  are one request, so a shard the plan reads within the horizon (block shuffle) costs one
  request;
- holds what it read ahead in the memory tier's bound, reserved until the step that needs
  it: read-ahead is never evicted or dropped before use; ahead of need it takes only spare
  room, at need a run may evict entries needed after it (``_room`` explains the trade), so
  within an epoch no sample is fetched twice for its use;
- after use, admits a sample into a tier only if it is needed again before what it would
  evict (Belady's policy, optimal for a known sequence): memory first, the disk tier for
  what memory evicts; while the disk tier has free room it also keeps a copy of what
  memory admits, so that the next run finds it. What a step reads and the cache does not
  admit is used and dropped. Entries an earlier run left on disk are ranked by this plan:
  those it does not read go first.

The cache changes no error a user sees: a source's error is raised as itself (never in an
exception group), and a disk-tier I/O error degrades the cache to memory only (a warning,
``disk_errors``) instead of failing the batch.

See ``docs/object-storage.md`` for the cost model, the tiers and admission.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import anyio

from ...core import as_int, check_sampler
from .._concurrency import PerLoop, gather_ordered
from ._disk import DiskTier, shard_folder
from ._planner import NEVER, HorizonPlanner
from ._plans import PlannedStream, Plans
from ._policy import Policy, ReadBudget, Sharing
from ._ranges import ByteRange, check_coalescing
from ._room import Displaced, RunTaker, Shape, between_held, grow_run
from ._source import RangeSource
from ._statistics import CacheStatistics, Tally
from ._tiers import MemoryTier
from ._turns import Pending, Turn, noting, on_the_loop

__all__ = ("KnownFutureCache",)

_Writes = list[tuple[int, Path, bytes]]
TASKS_PER_TURN = 64
"""Reads started in one event-loop turn."""


class KnownFutureCache:
    """Bounded cache of sample bytes in front of a ``TarShards``, driven by the plan.

    >>> cache = KnownFutureCache(max_bytes=256 << 20, lookahead_steps=16)
    >>> # source = TarShards(keys, store, cache=cache); DataLoader(source, ...) plans it

    Use it from one event loop at a time; one cache serves one source, and every stream
    over it (each its own plan). Memory use is at most ``max_bytes`` of sample bytes (kept
    and read ahead), plus the reads of the steps in flight.

    Args:
        max_bytes: Most bytes held in memory: samples kept for their next use and samples
            read ahead of their step.
        disk_dir: A folder for the disk tier (kept across runs), or None for memory only:
            a new or empty folder, or one a cache made (marked by its ``.aioloader-cache``
            file); any other folder that holds files is refused (``ValueError``).
        disk_bytes: Most bytes of entry files in ``disk_dir``.
        readahead_bytes: Most of ``max_bytes`` that read-ahead may hold at once (default
            256 MiB): a block shuffle reads whole shards when there is room for them.
        lookahead_steps: Steps after the current one whose samples are read with it.
        policy: ``"belady"`` (evict the furthest next use) or ``"lru"``.
        window_steps: Steps planned at a time (default ``max(8, lookahead_steps)``).
        horizon_windows: Windows of the plan kept known ahead of the reads.
        coalesce_gap: Two runs of one shard with only non-sample bytes (headers, skipped
            members) between them, at most this many, are read with one request.
        max_request_bytes: Largest read.
        fill_steps: A read grows over the neighbouring samples of its shard that steps up
            to this many ahead will read (default: the whole horizon).
    """

    def __init__(
        self,
        max_bytes: int,
        *,
        disk_dir: str | Path | None = None,
        disk_bytes: int = 0,
        readahead_bytes: int = 256 << 20,
        lookahead_steps: int = 16,
        policy: Policy = "belady",
        window_steps: int | None = None,
        horizon_windows: int = 4,
        coalesce_gap: int = 256 << 10,
        max_request_bytes: int = 64 << 20,
        fill_steps: int | None = None,
    ) -> None:
        self.max_bytes = _at_least("max_bytes", max_bytes, 1)
        self.readahead_bytes = _at_least("readahead_bytes", readahead_bytes, 0)
        self.lookahead_steps = _at_least("lookahead_steps", lookahead_steps, 0)
        if policy not in ("belady", "lru"):
            raise ValueError(f"policy must be 'belady' or 'lru' but got {policy!r}")
        self.policy: Policy = policy
        self.window_steps = (
            max(8, self.lookahead_steps)
            if window_steps is None
            else _at_least("window_steps", window_steps, 1)
        )
        self.horizon_windows = _at_least("horizon_windows", horizon_windows, 1)
        horizon = self.window_steps * self.horizon_windows
        self.fill_steps = horizon if fill_steps is None else _at_least("fill_steps", fill_steps, 0)
        self.coalesce_gap, self.max_request_bytes = check_coalescing(
            coalesce_gap, max_request_bytes
        )
        disk_bytes = _at_least("disk_bytes", disk_bytes, 0)
        if disk_dir is not None and not isinstance(disk_dir, (str, Path)):
            raise TypeError(f"disk_dir must be a str, a Path or None but got {disk_dir!r}")
        if disk_dir is not None and Path(disk_dir).exists() and not Path(disk_dir).is_dir():
            raise ValueError(f"disk_dir must be a folder but {str(disk_dir)!r} is a file")
        if (disk_dir is None) != (disk_bytes == 0):
            raise ValueError(
                "disk_dir and disk_bytes go together (a folder and a bound >= 1) but got "
                f"disk_dir={disk_dir!r}, disk_bytes={disk_bytes}"
            )
        spans = (max(1, self.lookahead_steps // 2), horizon)
        self.memory, self.disk = _tiers(policy, self.max_bytes, disk_dir, disk_bytes, spans)
        self._source: RangeSource | None = None
        self._versions: dict[str, str] = {}
        self._plans = Plans()  # one plan per stream it serves
        self._pending: dict[int, Pending] = {}
        self._pending_bytes = 0
        # read ahead, not used: (data, when, the stream it was read for)
        self._ahead: dict[int, tuple[bytes, float, Hashable]] = {}
        self._ahead_bytes = 0
        self._writing: dict[int, bytes] = {}  # on their way to disk: served from here
        self._displaced = Displaced(self.memory.max_bytes)  # kept entries read-ahead evicted
        self._tally = Tally()
        self._now = -1  # the latest step a batch read was matched to: when uses happen
        self._disk_tail: anyio.Event | None = None  # the latest disk job ends when it is set
        # reads take turns to classify their samples and choose what to read ahead, so that
        # reads of several steps started at once never split a shard's run between them
        self._choosing = PerLoop(anyio.Lock)

    # -- the plan ---------------------------------------------------------------------

    def bind(self, source: RangeSource) -> None:
        """Serve ``source`` (done by ``TarShards(..., cache=cache)``); one source per cache.

        With a disk tier this finds the entries earlier runs left for these shards
        (blocking: it lists the folder).
        """
        if self._source is not None and self._source is not source:
            raise ValueError("this KnownFutureCache already serves another source")
        if self._source is source:
            return
        self._source = source
        self._versions = dict(source.versions())
        if self.disk is not None:
            folders = {shard_folder(key, tag): key for key, tag in self._versions.items()}

            def locate(key: str, start: int, end: int) -> int | None:
                inside = source.indices_within(key, start, end)
                if len(inside) != 1 or source.span_of(inside[0])[1:] != (start, end):
                    return None
                return inside[0]

            self.disk.open(folders, locate)

    def plan(
        self,
        sampler: Any,
        seed: int,
        start_step: int = 0,
        stop_step: int | None = None,
        *,
        stream: Hashable | None = None,
    ) -> Hashable:
        """Read stream ``stream``'s batches in the order of ``sampler`` from ``start_step`` on.

        The loader calls it (in a worker thread, blocking) when a stream starts; entries
        already held are kept. It computes the plan's first window; later windows are
        computed in worker threads while batches are read. With ``stop_step`` (the stream's
        end) nothing past it is planned or read ahead, and the plan is removed once its
        last step is read; the stream is then expected back (the first horizon of its next
        pass, from ``stop_step`` on, ranks what it reads) until ``unplan`` or a stream
        never seen before starts. Several streams (training and evaluation) each keep
        their own plan: ``stream`` (default ``(id(sampler), seed)``) replaces only its
        own. Returns the stream's key, for ``unplan``.
        """
        check_sampler(sampler)
        planner = HorizonPlanner(
            sampler,
            seed,
            start_step,
            window_steps=self.window_steps,
            windows=self.horizon_windows,
            slack=max(256, 4 * self.lookahead_steps),
            stop_step=stop_step,
        )
        first = planner.wanted_window()
        assert first is not None
        horizon = planner.extend(first)
        after = None
        if planner.stop is not None and planner.stop > planner.start:  # the next pass
            after = HorizonPlanner(
                sampler,
                seed,
                planner.stop,
                window_steps=self.window_steps,
                windows=self.horizon_windows,
                slack=0,
                stop_step=2 * planner.stop - planner.start,
            )
            after.fill()
        key = (id(sampler), seed) if stream is None else stream
        on_the_loop(self._register, key, planner, horizon, after)
        return key

    def unplan(self, stream: Hashable) -> bool:
        """Forget stream ``stream``'s plan (the key ``plan`` returned) and expect it no more;
        False if it has no plan and is not expected back.

        A stream with a stop step unregisters when it ends but is expected back until this
        (or a new stream) forgets it; one without (or left early) stays until the same
        stream plans again, or this.
        """
        return bool(on_the_loop(self._unregister, stream))

    def _register(
        self, key: Hashable, planner: HorizonPlanner, horizon: Any, after: HorizonPlanner | None
    ) -> None:
        units = planner.install(horizon)
        self._rerank(units, self._plans.add(key, planner, self._now, after))

    def _unregister(self, key: Hashable) -> bool:
        self._displaced.forget(key)
        if not self._plans.forget(key):
            return False
        self._rerank([], None)
        return True

    def _rerank(self, fresh: list[int], new: PlannedStream | None) -> None:
        """Rank every entry again by the plans now registered: ``fresh`` (the ``new``
        plan's first window) as used now, the other plans' samples by their next use, the
        rest as never used again; read-ahead no plan needs is dropped."""
        for tier in self._tiers():
            tier.order.rank_all(NEVER)
        for unit in fresh:  # as used now, by the stream that used it last
            for tier in self._tiers():
                tier.rank(unit, self._next_use(unit), self._now, tier.order.owner(unit))
        for unit in self._plans.units(but=new):
            for tier in self._tiers():
                if unit in tier.order:
                    tier.rank(unit, self._next_use(unit))
        for unit in [u for u in self._ahead if self._next_use(u) == NEVER]:
            self._drop_ahead(unit)  # read ahead for a plan that is gone

    def offer(self, index: int, data: bytes) -> bool:
        """Keep sample ``index``'s bytes if a tier has room without evicting; False if not.

        ``TarShards`` offers what indexing a shard read anyway, so that an epoch after
        building the index on the fly does not read the same bytes again.
        """
        if self._holds(index):
            return True
        size = len(data)
        if self.memory.fits(size):
            self.memory.put(index, data)
            self.memory.rank(index, self._next_use(index))
            return True
        disk = self.disk
        if disk is not None and not disk.degraded and self._source is not None and disk.fits(size):
            path = self._disk_path(index, data)
            try:
                disk.write_now(path, data)
            except OSError as error:
                self._disk_failed(error)
                return False
            disk.add(index, size)
            disk.paths[index] = path
            disk.rank(index, self._next_use(index))
            return True
        return False

    def _tiers(self) -> list[Any]:
        return [self.memory] if self.disk is None else [self.memory, self.disk]

    def _holds(self, unit: int) -> bool:
        return (
            unit in self.memory
            or unit in self._ahead
            or unit in self._writing
            or (self.disk is not None and unit in self.disk)
        )

    def _disk_path(self, unit: int, data: bytes) -> Path:
        assert self._source is not None
        assert self.disk is not None
        key, start, end = self._source.span_of(unit)
        return self.disk.path_for(unit, key, self._versions[key], start, end, data)

    def _next_use(self, unit: int) -> int:
        return self._plans.next_use(unit)

    def _sharing(self, reader: Hashable) -> Sharing | None:
        """The streams sharing the tiers, for a read by stream ``reader`` (None: one)."""
        streams = self._plans.sharing
        return Sharing(reader, streams) if len(streams) > 1 else None

    async def _notice(self, units: list[int]) -> None:
        """New steps are known: rank again the entries they read."""
        turn = Turn()
        for unit in units:
            await turn.pause_if_due()
            for tier in self._tiers():
                if unit in tier.order:
                    tier.rank(unit, self._next_use(unit))

    async def _extend(self, stream: PlannedStream) -> None:
        """Compute the windows ``stream``'s horizon lacks in worker threads, one at a time.

        One reader computes them; a reader that comes meanwhile waits for it.
        """
        if stream.extending is not None:
            await stream.extending.wait()
            return
        stream.extending = done = anyio.Event()
        planner = stream.planner
        try:
            while self._plans.holds(stream) and (first := planner.wanted_window()) is not None:
                horizon = await anyio.to_thread.run_sync(planner.extend, first)
                await self._notice(planner.install(horizon))
        finally:
            stream.extending = None
            done.set()

    # -- reading ----------------------------------------------------------------------

    async def read(self, indices: Sequence[int]) -> list[bytes]:
        """The bytes of every sample of one batch, in the order of ``indices``."""
        source = self._source
        if source is None:
            raise RuntimeError("KnownFutureCache is not bound to a source (pass it as cache=)")
        stream: PlannedStream | None = None
        by: Hashable = None  # the stream reading (None: no plan knows the batch)
        step = 0
        found: dict[int, bytes] = {}
        waits: dict[int, Pending] = {}
        on_disk: dict[int, Path] = {}
        need: list[int] = []
        claimed: dict[int, Pending] = {}
        writes: tuple[list[Path], _Writes] = ([], [])
        ahead: dict[int, Pending] = {}
        damaged: list[int] = []
        try:
            async with self._choosing.get():
                # the step is taken in turn too: until then the reads before it choose for it
                matched = self._plans.match(indices)
                if matched is not None:
                    stream, step = matched
                    by = stream.key
                    stream.planner.consume(step)
                    self._now = max(self._now, stream.time(step))
                    if stream.finished:  # its last step: the stream ends, its plan goes
                        self._plans.end(stream)
                await self._classify(source, indices, found, waits, on_disk, need, claimed, by)
                turn = Turn()
                for unit in list(found):
                    if unit in self._ahead:
                        self._use_ahead(unit, *writes, by)
                        await turn.pause_if_due()
                if stream is not None:
                    self._tally.planned_batches += 1
                    await self._ahead_of(source, stream, step, set(need), ahead, writes)
            if (
                stream is not None
                and stream.planner.planned_until - step <= self.lookahead_steps + self.window_steps
            ):
                await self._extend(stream)
            # a failure is raised as itself, never in an exception group: the same errors
            # reach the user with and without a cache (the fetch's first)
            failures: list[Exception] = []
            async with anyio.create_task_group() as group:
                for each in self._plans if stream is None else [stream]:
                    if each.planner.wanted_window() is not None:
                        group.start_soon(noting, failures, self._extend, each)
                if on_disk:
                    group.start_soon(noting, failures, self._read_disk, on_disk, found, damaged)
                if claimed or ahead:
                    try:
                        await self._fetch(source, claimed, ahead, found, by)
                    except Exception as error:
                        failures.insert(0, error)
            if failures:
                raise failures[0]
            if damaged:
                again: dict[int, Pending] = {}
                for unit in damaged:
                    self._claim(source, unit, again, found)
                await self._fetch(source, again, {}, found, by)
            for unit, pending in waits.items():
                await pending.wait()
                if pending.data is None:  # the read that carried it failed: read it here
                    retry: dict[int, Pending] = {}
                    self._claim(source, unit, retry, found)
                    await self._fetch(source, retry, {}, found, by)
                else:
                    found[unit] = pending.data
        finally:
            for unit, pending in claimed.items():  # claimed but never fetched (cancelled)
                self._release(unit, pending)
            for unit, pending in ahead.items():  # chosen but never fetched (cancelled)
                self._release(unit, pending)
            if writes[0] or writes[1]:
                with anyio.CancelScope(shield=True):
                    await self._run_disk_job(*writes)
        return [found[int(i)] for i in indices]

    async def _classify(
        self,
        source: RangeSource,
        indices: Sequence[int],
        found: dict[int, bytes],
        waits: dict[int, Pending],
        on_disk: dict[int, Path],
        need: list[int],
        claimed: dict[int, Pending],
        by: Hashable,
    ) -> None:
        """Sort a batch's samples (stream ``by``'s): held in memory, on disk, on their way,
        or to read."""
        tally = self._tally
        turn = Turn()
        for unit in dict.fromkeys(int(i) for i in indices):
            if await turn.pause_if_due() and unit in self._pending:
                tally.hits += 1  # on its way since the pause
                waits[unit] = self._pending[unit]
                waits[unit].waiters += 1
                continue
            data = self._from_memory(unit, by)
            if data is not None:
                tally.hits += 1
                tally.memory_hits += 1
                found[unit] = data
            elif self.disk is not None and unit in self.disk:
                tally.hits += 1
                tally.disk_hits += 1
                on_disk[unit] = self.disk.paths[unit]
                self._rank(unit, by)
            elif unit in self._pending:
                tally.hits += 1
                waits[unit] = self._pending[unit]
                waits[unit].waiters += 1
            else:
                tally.misses += 1
                need.append(unit)
                self._claim(source, unit, claimed, found)  # on its way before any await

    def _from_memory(self, unit: int, by: Hashable) -> bytes | None:
        data = self.memory.data.get(unit)
        if data is not None:
            self._rank(unit, by)
            return data
        held = self._ahead.get(unit)
        if held is not None:
            return held[0]
        return self._writing.get(unit)

    def _rank(self, unit: int, by: Hashable) -> None:
        """A batch of stream ``by`` uses ``unit`` now: rank it by its next use, as used now."""
        for tier in self._tiers():
            tier.rank(unit, self._next_use(unit), self._now, by)

    def _use_ahead(self, unit: int, deletes: list[Path], writes: _Writes, by: Hashable) -> None:
        """A batch uses what was read ahead for it: it leaves the buffer for a tier."""
        data, arrived, owner = self._ahead.pop(unit)
        self._ahead_bytes -= len(data)
        self.memory.unreserve(len(data), owner)
        tally = self._tally
        tally.bytes_waiting -= len(data)
        tally.bytes_used += len(data)
        tally.prefetch_hits += 1
        tally.lead_total += time.monotonic() - arrived
        self._admit(unit, data, deletes, writes, by)

    def _drop_ahead(self, unit: int) -> None:
        data, _, owner = self._ahead.pop(unit)
        self._ahead_bytes -= len(data)
        self.memory.unreserve(len(data), owner)
        self._tally.bytes_waiting -= len(data)
        self._tally.bytes_dropped += len(data)

    async def _read_disk(
        self, on_disk: dict[int, Path], found: dict[int, bytes], damaged: list[int]
    ) -> None:
        """Read entries from disk into ``found``; a missing or damaged one is a miss after
        all (``damaged``). Shielded: local reads are short, and the batch's read goes on
        after its task group only when every sample is found or known damaged (a
        cancellation is delivered at its next checkpoint)."""
        with anyio.CancelScope(shield=True):
            read = await DiskTier.read_many(on_disk)
        for unit, data in read.items():
            if data is None:  # deleted or damaged meanwhile: a miss after all
                self._tally.hits -= 1
                self._tally.disk_hits -= 1
                self._tally.misses += 1
                disk = self.disk
                if disk is not None and disk.paths.get(unit) == on_disk[unit]:
                    disk.remove(unit, evicted=False)
                    disk.paths.pop(unit, None)
                damaged.append(unit)
            else:
                found[unit] = data

    # -- what to read ahead -----------------------------------------------------------

    async def _ahead_of(
        self,
        source: RangeSource,
        stream: PlannedStream,
        step: int,
        need: set[int],
        chosen: dict[int, Pending],
        writes: tuple[list[Path], _Writes],
    ) -> None:
        """Samples to read with step ``step``'s: whole runs of shards, soonest needed first.

        Each sample this step misses, then each one the next ``lookahead_steps`` steps
        need, brings the run of its shard's neighbours that its epoch needs within
        ``fill_steps`` steps (one range read). Read-ahead is held in the memory tier's bound
        until its step uses it, so it is never evicted or dropped before use. What room a
        run may take is decided in ``_room``: spare room ahead of need (a run without it
        waits for a later step), and at need (``URGENT_STEPS``) the run's part needed soon
        may evict entries needed after it. Chosen samples are marked on their way at once
        (``chosen``), and the choice yields to the event loop every ``YIELD_SECONDS``.
        Steps are ``stream``'s; next uses are on the cache's clock (``stream.time``).
        """
        budget = ReadBudget(self.readahead_bytes - self.memory.reserved)
        planner = stream.planner
        soon = stream.time(step + self.lookahead_steps)

        def free(unit: int) -> bool:
            return not self._holds(unit) and unit not in self._pending and unit not in need

        def make_room(size: int, later: int, wanted: int) -> bool:
            return self._make_room(size, later, stream, *writes, wanted=wanted)

        taker = RunTaker(
            (step, soon),
            free,
            functools.partial(_size, source),
            functools.partial(self._plans.next_use, passes=False),
            make_room,
            budget,
            lambda: self._displaced.allows(stream.key, planner.epoch_end(step)),
        )

        async def choose(members: list[int], anchor: int) -> None:
            for member in members:  # their room is made (see RunTaker)
                size = _size(source, member)
                if size and free(member):  # an empty sample needs no read
                    pending = chosen[member] = self._pending[member] = Pending(size)
                    pending.reserved, pending.by, pending.run = True, stream.key, anchor
                    self._pending_bytes += size
                else:
                    self.memory.unreserve(size, stream.key)
                await turn.pause_if_due()

        reach = step + max(self.fill_steps, self.lookahead_steps)

        def limit(later: int) -> tuple[int, int]:  # a run grows over what this epoch reads
            end = planner.epoch_end(later) - 1  # soon, and past held samples what it reads
            return stream.time(min(reach, end)), min(soon, stream.time(end))  # very soon

        turn = Turn()
        for unit in sorted(need):  # a miss brings its run of neighbours needed soon
            self._pending[unit].run = unit
            run = await self._run(source, unit, limit(step), free, turn)
            await choose(taker.take(run, unit, step), unit)
        for later in range(step + 1, min(step + 1 + self.lookahead_steps, planner.planned_until)):
            if planner.is_read(later):
                continue  # its read is under way: what it holds it does not need again
            for unit in planner.step_indices(later).tolist():
                await turn.pause_if_due()
                if not free(unit):
                    continue
                run = await self._run(source, unit, limit(later), free, turn)
                run = taker.take(run, unit, later)
                if not run:
                    return  # the rest waits for room: a later step reads it whole
                await choose(run, unit)

    def _make_room(
        self,
        size: int,
        step: int,
        stream: PlannedStream,
        deletes: list[Path],
        writes: _Writes,
        *,
        wanted: int,
    ) -> bool:
        """Reserve ``size`` bytes in memory to read ahead for step ``step``; False if not.

        Only entries needed after ``wanted`` are evicted (they move to disk if it admits
        them), furthest first, and of those that no plan reads again only the ones a step
        of ``step``'s epoch already used (an older one may be needed beyond the horizon).
        """
        planner = stream.planner
        since = stream.time(planner.epoch_end(step) - planner.steps_per_epoch)
        victims = self.memory.room_for(size, wanted, since, self._sharing(stream.key))
        if victims is None:
            return False
        known = sum(self.memory.sizes[v] for v in victims if self._next_use(v) < NEVER)
        self._displaced.add(stream.key, planner.epoch_end(step), known)
        self._evict_from_memory(victims, deletes, writes)
        self.memory.reserve(size, stream.key)
        return True

    def _evict_from_memory(self, victims: list[int], deletes: list[Path], writes: _Writes) -> None:
        """Evict ``victims`` from memory; each moves to disk if the disk tier admits it."""
        for victim in victims:
            owner = self.memory.order.owner(victim)
            moved = self.memory.take(victim, evicted=True)
            if self.disk is None or victim not in self.disk:
                self._to_disk(victim, moved, self._next_use(victim), deletes, writes, owner)

    async def _run(
        self, source: RangeSource, unit: int, limits: tuple[int, int], free: Any, turn: Turn
    ) -> list[int]:
        """``unit``'s run in its shard (see ``_room.grow_run``): neighbours free and needed by
        ``limits[0]``, and past samples held those needed by ``limits[1]``."""

        def wanted(other: int) -> int:
            return self._plans.next_use(other, passes=False) if free(other) else NEVER

        def held(other: int) -> bool:
            return self._holds(other) and other not in self._pending

        shape = Shape(source.span_of, len(source), self.coalesce_gap, self.max_request_bytes)
        return await grow_run(unit, shape, wanted, held, limits, turn)

    # -- fetching ---------------------------------------------------------------------

    async def _ranges(
        self, source: RangeSource, owned: dict[int, Pending]
    ) -> list[tuple[ByteRange, list[int]]]:
        """The samples ``owned`` merged into requests across gaps of at most ``coalesce_gap``
        bytes that hold no sample, or (within one run chosen to be read) only samples held:
        their bytes count as between."""
        units = list(owned)
        turn = Turn()
        spans = []
        for unit in units:
            spans.append((source.span_of(unit), unit))
            await turn.pause_if_due()
        spans.sort()
        merged: list[tuple[ByteRange, list[int]]] = []
        for (key, start, end), unit in spans:
            await turn.pause_if_due()
            if merged:
                (last_key, last_start, last_end), members = merged[-1]
                if (
                    last_key == key
                    and 0 <= start - last_end <= self.coalesce_gap
                    and end - last_start <= self.max_request_bytes
                    and between_held(source, self._holds, (key, last_end, start), owned, unit)
                ):
                    merged[-1] = ((key, last_start, max(end, last_end)), [*members, unit])
                    continue
            merged.append(((key, start, end), [unit]))
        return merged

    def _claim(
        self, source: RangeSource, unit: int, claimed: dict[int, Pending], found: dict[int, bytes]
    ) -> None:
        """Mark ``unit`` on its way for this batch (an empty sample is found at once)."""
        _, start, end = source.span_of(unit)
        if start == end:
            found[unit] = b""
            return
        claimed[unit] = self._pending[unit] = Pending(end - start)
        self._pending_bytes += end - start

    async def _fetch(
        self,
        source: RangeSource,
        need: dict[int, Pending],
        ahead: dict[int, Pending],
        found: dict[int, bytes],
        by: Hashable,
    ) -> None:
        """Read ``need`` (for this batch of stream ``by``) and ``ahead``, both already marked
        on their way."""
        demanded = set(need)
        owned = {**need, **ahead}
        arrived: dict[int, bytes] = {}

        async def read_one(item: tuple[ByteRange, list[int]]) -> None:
            (key, start, end), members = item
            data = await source.read_range(key, start, end)
            tally = self._tally
            tally.requests += 1
            tally.bytes_fetched += len(data)
            carried = 0
            turn = Turn()
            for unit in members:
                await turn.pause_if_due()
                _, begin, stop = source.span_of(unit)
                piece = data[begin - start : stop - start]
                carried += len(piece)
                arrived[unit] = piece
                owned[unit].data = piece
                if unit in demanded:
                    found[unit] = piece
            tally.bytes_between += len(data) - carried  # headers, samples held passed over

        deletes: list[Path] = []
        writes: _Writes = []

        async def read_some(some: list[tuple[ByteRange, list[int]]]) -> None:
            await gather_ordered(read_one, some)

        try:  # reads start TASKS_PER_TURN at a time: spawning thousands takes a while
            ranges = await self._ranges(source, owned)
            parts = [ranges[k : k + TASKS_PER_TURN] for k in range(0, len(ranges), TASKS_PER_TURN)]
            await gather_ordered(read_some, parts)
        finally:
            with anyio.CancelScope(shield=True):
                await self._keep(arrived, owned, demanded, deletes, writes, by)
            for unit, pending in owned.items():
                self._release(unit, pending)
            if deletes or writes:
                with anyio.CancelScope(shield=True):
                    await self._run_disk_job(deletes, writes)

    def _release(self, unit: int, pending: Pending) -> None:
        """The read of ``unit`` ended; waiters of a failed read see None and read it again."""
        if self._pending.get(unit) is pending:
            del self._pending[unit]
            self._pending_bytes -= pending.size
        if pending.reserved:  # read ahead, never arrived: its room goes back
            pending.reserved = False
            self.memory.unreserve(pending.size, pending.by)
        pending.finish()

    async def _keep(
        self,
        arrived: dict[int, bytes],
        owned: dict[int, Pending],
        demanded: set[int],
        deletes: list[Path],
        writes: _Writes,
        by: Hashable,
    ) -> None:
        """Samples used now (by stream ``by``) go to a tier if admitted; samples read ahead
        to the buffer."""
        tally = self._tally
        now = time.monotonic()
        turn = Turn()
        ordered = []
        for unit in arrived:
            ordered.append((self._next_use(unit), unit))
            await turn.pause_if_due()
        ordered.sort()
        for _, unit in ordered:
            await turn.pause_if_due()
            data = arrived[unit]
            size = len(data)
            pending = owned[unit]
            if pending.reserved:  # read ahead: its room was made when it was chosen
                pending.reserved = False
                if unit in demanded or pending.waiters > 0 or self._holds(unit):
                    self.memory.unreserve(size, pending.by)
            if unit in demanded or pending.waiters > 0:
                tally.bytes_used += size
                self._admit(unit, data, deletes, writes, by)
            elif not self._holds(unit):
                self._ahead[unit] = (data, now, pending.by)  # keeps the room reserved until used
                self._ahead_bytes += size
                tally.bytes_waiting += size
                tally.prefetched += 1
            else:
                tally.bytes_dropped += size

    def _admit(
        self, unit: int, data: bytes, deletes: list[Path], writes: _Writes, by: Hashable
    ) -> None:
        """Keep a sample stream ``by`` used if it is needed again before what it would evict.

        Memory first, evicting entries needed later (they move to disk if the disk tier
        admits them by the same rule); else the disk tier; else it is dropped. Another
        stream's entries beyond the plans go only out of what it holds over its share.
        """
        if self._holds(unit):
            return
        when = self._next_use(unit)
        victims = self.memory.room_for(len(data), when, sharing=self._sharing(by), rival=unit)
        disk = self.disk
        if victims is not None:
            self._evict_from_memory(victims, deletes, writes)
            self.memory.put(unit, data)
            self.memory.rank(unit, when, self._now, by)
            if disk is not None and disk.fits(len(data)):  # a copy for the next run
                self._to_disk(unit, data, when, deletes, writes, by)
            return
        self._to_disk(unit, data, when, deletes, writes, by)

    def _to_disk(
        self,
        unit: int,
        data: bytes,
        when: int,
        deletes: list[Path],
        writes: _Writes,
        by: Hashable,
    ) -> None:
        disk = self.disk
        if disk is None or disk.degraded or unit in disk:
            return
        victims = disk.room_for(len(data), when, sharing=self._sharing(by))
        if victims is None:
            return
        for victim in victims:
            disk.remove(victim, evicted=True)
            deletes.append(disk.paths.pop(victim))
        path = self._disk_path(unit, data)
        disk.add(unit, len(data))
        disk.paths[unit] = path
        disk.rank(unit, when, self._now, by)
        self._writing[unit] = data
        writes.append((unit, path, data))

    async def _run_disk_job(self, deletes: list[Path], writes: _Writes) -> None:
        """Delete evicted files, then write new ones, jobs in the order they were decided.

        Each job waits for the one before it and deletes before it writes, so the files on
        disk never exceed the bound even while several jobs are in flight. An I/O error
        degrades the cache to memory only (see ``_disk_failed``): the write's bytes are
        unbooked, and its temporary file removed; the batch is not affected.
        """
        disk = self.disk
        assert disk is not None
        previous = self._disk_tail
        self._disk_tail = done = anyio.Event()
        failed: list[tuple[int, Path]] = []
        error: OSError | None = None
        try:
            if previous is not None and not previous.is_set():  # (set: maybe another loop's)
                await previous.wait()
            for path in deletes:
                try:
                    await disk.delete(path)
                except OSError as exc:
                    error = error or exc
            for unit, path, data in writes:
                if disk.paths.get(unit) != path:
                    continue  # evicted meanwhile
                if error is not None or disk.degraded:
                    failed.append((unit, path))
                    continue
                try:
                    await disk.write(path, data)
                except OSError as exc:
                    error = exc
                    failed.append((unit, path))
        finally:
            done.set()
            for unit, _, data in writes:
                if self._writing.get(unit) is data:
                    del self._writing[unit]
        for unit, path in failed:  # booked when decided: unbooked, never written
            if disk.paths.get(unit) == path:
                disk.remove(unit, evicted=False)
                del disk.paths[unit]
        if error is not None:
            self._disk_failed(error)

    def _disk_failed(self, error: OSError) -> None:
        """A disk-tier I/O error: counted, and the tier takes no new entries from now on
        (memory only); the first one warns. Entries already on disk are still read."""
        self._tally.disk_errors += 1
        disk = self.disk
        if disk is not None and not disk.degraded:
            disk.degraded = True
            warnings.warn(
                f"aioloader: the KnownFutureCache disk tier in {str(disk.directory)!r} failed "
                f"({error}); the cache goes on in memory only",
                RuntimeWarning,
                stacklevel=3,
            )

    # -- statistics -------------------------------------------------------------------

    def statistics(self) -> CacheStatistics:
        """A snapshot of the counters."""
        tally, memory, disk = self._tally, self.memory, self.disk
        lead = tally.lead_total / tally.prefetch_hits if tally.prefetch_hits else 0.0
        disk_evicted = 0 if disk is None else disk.evicted_bytes
        return CacheStatistics(
            **tally.counts(),
            bytes_evicted=memory.evicted_bytes + disk_evicted,
            memory_bytes_evicted=memory.evicted_bytes,
            disk_bytes_evicted=disk_evicted,
            evictions=memory.evictions + (0 if disk is None else disk.evictions),
            current_bytes=memory.bytes,
            peak_bytes=memory.peak,
            max_bytes=self.max_bytes,
            readahead_bytes=self._ahead_bytes,
            disk_bytes=0 if disk is None else disk.bytes,
            disk_peak_bytes=0 if disk is None else disk.peak,
            disk_max_bytes=0 if disk is None else disk.max_bytes,
            disk_degraded=disk is not None and disk.degraded,
            entries=len(memory) if disk is None else len(memory.sizes.keys() | disk.sizes.keys()),
            mean_prefetch_lead_seconds=lead,
            planner_bytes=self._plans.nbytes,
            planned_streams=len(self._plans),
        )

    def __repr__(self) -> str:
        disk = "" if self.disk is None else f", disk_dir={str(self.disk.directory)!r}"
        return (
            f"KnownFutureCache(max_bytes={self.max_bytes}{disk}, policy={self.policy!r}, "
            f"lookahead_steps={self.lookahead_steps})"
        )


def _tiers(
    policy: Policy,
    max_bytes: int,
    disk_dir: str | Path | None,
    disk_bytes: int,
    spans: tuple[int, int],
) -> tuple[MemoryTier, DiskTier | None]:
    """The memory tier and the disk tier (None without ``disk_dir``), with the spans of
    steps whose next uses rank alike (see ``EvictionOrder``): half the lookahead in memory,
    a whole horizon on disk, so that entries are not rewritten there for small gains (a
    write and an fsync cost more than a request)."""
    memory = MemoryTier(max_bytes, policy, spans[0])
    disk = None if disk_dir is None else DiskTier(Path(disk_dir), disk_bytes, policy, spans[1])
    return memory, disk


def _size(source: RangeSource, unit: int) -> int:
    _, start, end = source.span_of(unit)
    return end - start


def _at_least(name: str, value: Any, low: int) -> int:
    number = as_int(name, value)
    if number < low:
        raise ValueError(f"{name} must be an integer >= {low} but got {number}")
    return number
