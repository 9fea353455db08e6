"""The read path: one batch's samples found in the tiers, awaited, or fetched with read-ahead.

A ``BatchRead`` reads one batch. In turn with the other reads (so that reads of several
steps started at once never split a shard's run between them) it takes its step in the
plan, sorts its samples (held in memory, on disk, on their way, or to read) and chooses
what to read ahead. Then, concurrently, it extends the plan, reads disk entries, and
fetches its misses with the runs they bring; the read-ahead for later steps (and at a
stream's first step the misses' long runs too) is handed to a server behind the steps
(``_behind``), or fetched with the misses where none runs. Then it waits for samples
other reads carry. A source's error is raised as itself (never in an exception group),
so the same errors reach the user with and without a cache; a sample whose read failed
elsewhere is read again here.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

from .._concurrency import PerLoop
from ._admission import Admission, DiskJob
from ._behind import Behind
from ._disk import DiskTier
from ._fetching import Fetcher
from ._held import Holdings
from ._planning import Planning
from ._plans import PlannedStream
from ._readahead import ReadAhead
from ._turns import Pending, Turn, noting

__all__ = ("SPLIT_REQUESTS", "BatchRead", "Parts")

SPLIT_REQUESTS = 8
"""A miss's run longer than this many requests' worth of bytes (``coalesce_gap`` each) is
read behind a stream's first step, the miss itself exactly."""


@dataclass
class Parts:
    """The cache's parts a read goes through, and the lock reads take turns with."""

    held: Holdings
    planning: Planning
    admission: Admission
    readahead: ReadAhead
    fetcher: Fetcher
    behind: Behind
    choosing: PerLoop[anyio.Lock]


class BatchRead:
    """The read of one batch's samples, ``indices`` (see the module's docstring)."""

    def __init__(self, parts: Parts, indices: Sequence[int]) -> None:
        self.parts = parts
        self.indices = indices
        self.stream: PlannedStream | None = None
        self.by: Hashable = None  # the stream reading (None: no plan knows the batch)
        self.step = -1  # its step in that stream's plan
        self.found: dict[int, bytes] = {}
        self.waits: dict[int, Pending] = {}
        self.on_disk: dict[int, Path] = {}
        self.claimed: dict[int, Pending] = {}  # misses, marked on their way
        self.ahead: dict[int, Pending] = {}  # read-ahead chosen with them
        self.damaged: list[int] = []  # disk entries found missing or damaged
        self.job = DiskJob()

    async def run(self) -> list[bytes]:
        """The bytes of every sample, in the order of ``indices``."""
        parts = self.parts
        parts.held.bound_source()
        parts.behind.let_go()  # the read-ahead a first step held back
        try:
            async with parts.choosing.get():
                step = self._take_step()
                await self._sort()
                await self._use_ahead()
                if self.stream is not None:
                    parts.held.tally.planned_batches += 1
                    chosen = await parts.readahead.choose(self.stream, step, set(self.claimed))
                    self.ahead = chosen.pending
                    self.job.add(chosen.job)
            if self.stream is not None and parts.planning.running_short(self.stream, step):
                await parts.planning.extend(self.stream)
            await self._fetch_and_read_disk()
            if self.damaged:
                await self._read_again(self.damaged)
            await self._wait_for_others()
        finally:
            for unit, pending in [*self.claimed.items(), *self.ahead.items()]:
                parts.held.release(unit, pending)  # never fetched (cancelled), else a no-op
            await parts.admission.run(self.job)
        return [self.found[int(i)] for i in self.indices]

    def _take_step(self) -> int:
        """The step of the stream whose batch this is (-1: none)."""
        matched = self.parts.planning.match(self.indices)
        if matched is None:
            return -1
        self.stream, self.step = matched
        self.by = self.stream.key
        return self.step

    async def _sort(self) -> None:
        """Sort the samples: held in memory, on disk, on their way, or to read (claimed at
        once, before any await, so that no other read fetches them too)."""
        held = self.parts.held
        tally = held.tally
        turn = Turn()
        for unit in dict.fromkeys(int(i) for i in self.indices):
            if await turn.pause_if_due() and unit in held.pending:
                tally.hits += 1  # on its way since the pause
                self._wait_for(unit)
                continue
            data = held.from_memory(unit, self.by)
            if data is not None:
                tally.hits += 1
                tally.memory_hits += 1
                self.found[unit] = data
            elif held.disk is not None and unit in held.disk:
                tally.hits += 1
                tally.disk_hits += 1
                self.on_disk[unit] = held.disk.paths[unit]
                held.rank(unit, self.by)
            elif unit in held.pending:
                tally.hits += 1
                self._wait_for(unit)
            else:
                tally.misses += 1
                self._claim(unit, self.claimed)

    def _wait_for(self, unit: int) -> None:
        pending = self.waits[unit] = self.parts.held.pending[unit]
        pending.waiters += 1

    def _claim(self, unit: int, into: dict[int, Pending]) -> None:
        pending = self.parts.held.claim(unit)
        if pending is None:  # an empty sample: nothing to read
            self.found[unit] = b""
        else:
            into[unit] = pending

    async def _use_ahead(self) -> None:
        """What was read ahead for this batch leaves the buffer for a tier."""
        parts = self.parts
        turn = Turn()
        for unit in list(self.found):
            if unit in parts.held.ahead:
                self.job.add(parts.admission.use_ahead(unit, self.by))
                await turn.pause_if_due()

    async def _fetch_and_read_disk(self) -> None:
        """Extend the plans, read disk entries and fetch the misses with the read-ahead,
        concurrently. The fetch's failure is raised first."""
        parts = self.parts
        failures: list[Exception] = []
        async with anyio.create_task_group() as group:
            for each in parts.planning.wanting(self.stream):
                group.start_soon(noting, failures, parts.planning.extend, each)
            if self.on_disk:
                group.start_soon(noting, failures, self._read_disk)
            own = anyio.Event()  # set when this step's own samples are in
            exact = self._hand_over(own)
            try:
                if self.claimed or self.ahead:
                    fetch = parts.fetcher.fetch(self.claimed, self.ahead, self.by, exact=exact)
                    self.found |= await fetch
            except Exception as error:
                failures.insert(0, error)
            finally:
                own.set()
        if failures:
            raise failures[0]

    def _hand_over(self, own: anyio.Event) -> bool:
        """Read ahead behind the steps, where a server runs: the runs for later steps, and
        at the stream's first step (cold, or resumed) the long runs of its misses too (over
        ``SPLIT_REQUESTS`` requests' worth of bytes), so that the first batch reads its own
        samples exactly; True when some were. (The steps read with it find their samples
        on their way in those runs.) At the first step the read-ahead starts once ``own``
        is set (its own samples are in) and another read begins (``Behind.let_go``): it
        would share the bandwidth and the CPU with them and with the first batch's build."""
        parts, stream = self.parts, self.stream
        ramp = stream is not None and self.step == stream.planner.start
        sizes: dict[int, int] = {}
        for pending in self.ahead.values():
            sizes[pending.run] = sizes.get(pending.run, 0) + pending.size
        long = SPLIT_REQUESTS * parts.fetcher.coalesce_gap
        split = {run for run, size in sizes.items() if ramp and run in self.claimed and size > long}
        behind = {
            unit: pending
            for unit, pending in self.ahead.items()
            if pending.run not in self.claimed or pending.run in split
        }
        if not behind or not parts.behind.hand_over(behind, self.by, own if ramp else None):
            return False
        for unit in behind:  # the server fetches (and releases) them now
            del self.ahead[unit]
        return bool(split)

    async def _read_disk(self) -> None:
        """Read entries from disk; a missing or damaged one is a miss after all
        (``damaged``). Shielded: local reads are short, and the batch's read goes on only
        when every sample is found or known damaged."""
        held = self.parts.held
        with anyio.CancelScope(shield=True):
            read = await DiskTier.read_many(self.on_disk)
        for unit, data in read.items():
            if data is not None:
                self.found[unit] = data
                continue
            tally = held.tally  # deleted or damaged meanwhile: a miss after all
            tally.hits -= 1
            tally.disk_hits -= 1
            tally.misses += 1
            disk = held.disk
            if disk is not None and disk.paths.get(unit) == self.on_disk[unit]:
                disk.remove(unit, evicted=False)
                disk.paths.pop(unit, None)
            self.damaged.append(unit)

    async def _read_again(self, units: list[int]) -> None:
        """Fetch ``units`` for this batch alone."""
        again: dict[int, Pending] = {}
        for unit in units:
            self._claim(unit, again)
        self.claimed |= again
        self.found |= await self.parts.fetcher.fetch(again, {}, self.by)

    async def _wait_for_others(self) -> None:
        """Wait for the samples other reads carry; one whose read failed is read here."""
        if self.waits:
            self.parts.behind.let_go()  # none of them waits on read-ahead held back
        for unit, pending in self.waits.items():
            await pending.wait()
            if pending.data is None:
                await self._read_again([unit])
            else:
                self.found[unit] = pending.data
