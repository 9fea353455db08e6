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

from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from ...core import at_least
from .._concurrency import PerLoop
from ._admission import Admission
from ._behind import Behind
from ._disk import DiskTier, check_disk
from ._disk_folder import shard_folder
from ._fetching import Fetcher
from ._held import Holdings
from ._planning import Horizon, Planning
from ._policy import Policy
from ._ranges import check_coalescing
from ._readahead import Reach, ReadAhead
from ._reading import BatchRead, Parts
from ._servers import Servers
from ._source import RangeSource
from ._statistics import CacheStatistics
from ._tiers import MemoryTier

__all__ = ("KnownFutureCache",)


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
        self.max_bytes = at_least("max_bytes", max_bytes, 1)
        self.readahead_bytes = at_least("readahead_bytes", readahead_bytes, 0)
        self.lookahead_steps = at_least("lookahead_steps", lookahead_steps, 0)
        if policy not in ("belady", "lru"):
            raise ValueError(f"policy must be 'belady' or 'lru' but got {policy!r}")
        self.policy: Policy = policy
        self.window_steps = (
            max(8, self.lookahead_steps)
            if window_steps is None
            else at_least("window_steps", window_steps, 1)
        )
        self.horizon_windows = at_least("horizon_windows", horizon_windows, 1)
        horizon = self.window_steps * self.horizon_windows
        self.fill_steps = horizon if fill_steps is None else at_least("fill_steps", fill_steps, 0)
        self.coalesce_gap, self.max_request_bytes = check_coalescing(
            coalesce_gap, max_request_bytes
        )
        disk_bytes = check_disk(disk_dir, disk_bytes)
        spans = (max(1, self.lookahead_steps // 2), horizon)
        self.memory, self.disk = _tiers(policy, self.max_bytes, disk_dir, disk_bytes, spans)
        self._held = held = Holdings(self.memory, self.disk)
        servers = Servers()
        self._admission = admission = Admission(held, servers)
        self._planning = Planning(
            held, Horizon(self.window_steps, self.horizon_windows, self.lookahead_steps)
        )
        reach = Reach(
            self.lookahead_steps,
            self.fill_steps,
            self.readahead_bytes,
            self.coalesce_gap,
            self.max_request_bytes,
        )
        fetcher = Fetcher(held, admission, self.coalesce_gap, self.max_request_bytes)
        self._behind = Behind(held, fetcher, servers)
        self._parts = Parts(
            held,
            self._planning,
            admission,
            ReadAhead(held, admission, reach),
            fetcher,
            self._behind,
            PerLoop(anyio.Lock),
        )

    # -- the plan ---------------------------------------------------------------------

    def bind(self, source: RangeSource) -> None:
        """Serve ``source`` (done by ``TarShards(..., cache=cache)``); one source per cache.

        With a disk tier this finds the entries earlier runs left for these shards
        (blocking: it lists the folder).
        """
        held = self._held
        if held.source is not None and held.source is not source:
            raise ValueError("this KnownFutureCache already serves another source")
        if held.source is source:
            return
        held.source = source
        held.versions = dict(source.versions())
        if self.disk is not None:
            folders = {shard_folder(key, tag): key for key, tag in held.versions.items()}

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
        already held are kept. It computes the plan's first two windows; later windows are
        computed in worker threads while batches are read. With ``stop_step`` (the stream's
        end) nothing past it is planned or read ahead, and the plan is removed once its
        last step is read; the stream is then expected back (the first horizon of its next
        pass, from ``stop_step`` on, ranks what it reads) until ``unplan`` or a stream
        never seen before starts. Several streams (training and evaluation) each keep
        their own plan: ``stream`` (default ``(id(sampler), seed)``) replaces only its
        own. Returns the stream's key, for ``unplan``.
        """
        return self._planning.plan(sampler, seed, (start_step, stop_step), stream)

    def unplan(self, stream: Hashable) -> bool:
        """Forget stream ``stream``'s plan (the key ``plan`` returned) and expect it no more;
        False if it has no plan and is not expected back.

        A stream with a stop step unregisters when it ends but is expected back until this
        (or a new stream) forgets it; one without (or left early) stays until the same
        stream plans again, or this.
        """
        return self._planning.unplan(stream)

    def offer(self, index: int, data: bytes) -> bool:
        """Keep sample ``index``'s bytes if a tier has room without evicting; False if not.

        ``TarShards`` offers what indexing a shard read anyway, so that an epoch after
        building the index on the fly does not read the same bytes again.
        """
        return self._admission.offer(index, data)

    # -- reading ----------------------------------------------------------------------

    async def read(self, indices: Sequence[int]) -> list[bytes]:
        """The bytes of every sample of one batch, in the order of ``indices``."""
        return await BatchRead(self._parts, indices).run()

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Fetch read-ahead and write the disk tier behind the steps on this event loop
        until cancelled (then finish the writes).

        The loader runs it for each stream (through ``TarShards.serve_reads``): a step then
        awaits only its own samples while the runs it chose for later steps are fetched
        here, and its disk writes run here. Without it, a step fetches its read-ahead with
        its own reads and writes its disk entries itself. With ``task_group.start``, it
        returns once it serves.
        """
        await self._behind.serve(task_status=task_status)

    # -- statistics -------------------------------------------------------------------

    def statistics(self) -> CacheStatistics:
        """A snapshot of the counters."""
        held = self._held
        tally, memory, disk = held.tally, self.memory, self.disk
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
            readahead_bytes=held.ahead_bytes,
            disk_bytes=0 if disk is None else disk.bytes,
            disk_peak_bytes=0 if disk is None else disk.peak,
            disk_max_bytes=0 if disk is None else disk.max_bytes,
            disk_degraded=disk is not None and disk.degraded,
            entries=len(memory) if disk is None else len(memory.sizes.keys() | disk.sizes.keys()),
            mean_prefetch_lead_seconds=lead,
            planner_bytes=held.plans.nbytes,
            planned_streams=len(held.plans),
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
