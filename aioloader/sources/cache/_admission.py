"""Admission and eviction: which used sample a tier keeps, and the disk jobs that follow.

After use, a sample is admitted into a tier only if it is needed again before what it
would evict (Belady's policy, optimal for a known sequence): memory first, the disk tier
for what memory evicts; while the disk tier has free room it also keeps a copy of what
memory admits, so that the next run finds it. What is not admitted is used and dropped.

Decisions are made on the event loop at once (the books never lag); the file work they
imply is a ``DiskJob`` (deletes, then writes), run after, one job at a time in the order
decided, so the files on disk never exceed the bound. While a server runs on the loop
(``_servers``), a job runs behind the steps, in the server's group: the step that decided
it goes on at once, and a sample on its way to disk is served from memory meanwhile. At
most ``BYTES_BEHIND`` bytes wait to be written so: past that, a step runs its job itself,
after the ones before it, which holds the reads back until the disk catches up.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from ._held import Holdings
from ._servers import Servers
from ._turns import Pending, Turn

__all__ = ("BYTES_BEHIND", "Admission", "DiskJob")

BYTES_BEHIND = 16 * 2**20
"""The most bytes of disk writes that wait behind the steps; a step past it writes itself."""


@dataclass
class DiskJob:
    """File work decided on the loop: entry files to delete, then ``(unit, path, bytes)`` to
    write."""

    deletes: list[Path] = field(default_factory=list)
    writes: list[tuple[int, Path, bytes]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.deletes or self.writes)

    def add(self, other: DiskJob) -> DiskJob:
        """Append ``other``'s work to this job's; returns this job."""
        self.deletes += other.deletes
        self.writes += other.writes
        return self


class Admission:
    """What a tier keeps of the samples used, and the disk work it implies."""

    def __init__(self, held: Holdings, servers: Servers) -> None:
        self.held = held
        self._servers = servers
        self._disk_tail: anyio.Event | None = None  # the latest disk job ends when it is set
        self.bytes_behind = 0  # of the disk writes waiting behind the steps

    def offer(self, index: int, data: bytes) -> bool:
        """Keep ``index``'s bytes if a tier has room without evicting; False if not."""
        held = self.held
        if held.holds(index):
            return True
        size = len(data)
        if held.memory.fits(size):
            held.memory.put(index, data)
            held.memory.rank(index, held.next_use(index))
            return True
        disk = held.disk
        if disk is not None and not disk.degraded and held.source is not None and disk.fits(size):
            path = held.disk_path(index, data)
            try:
                disk.write_now(path, data)
            except OSError as error:
                self.disk_failed(error)
                return False
            disk.add(index, size)
            disk.paths[index] = path
            disk.rank(index, held.next_use(index))
            return True
        return False

    def admit(self, unit: int, data: bytes, by: Hashable) -> DiskJob:
        """Keep a sample stream ``by`` used if it is needed again before what it would evict.

        Memory first, evicting entries needed later (they move to disk if the disk tier
        admits them by the same rule); else the disk tier; else it is dropped. Another
        stream's entries beyond the plans go only out of what it holds over its share.
        """
        held = self.held
        if held.holds(unit):
            return DiskJob()
        when = held.next_use(unit)
        memory, disk = held.memory, held.disk
        victims = memory.room_for(len(data), when, sharing=held.sharing(by), rival=unit)
        if victims is None:
            return self.to_disk(unit, data, when, by)
        job = self.evict_from_memory(victims)
        memory.put(unit, data)
        memory.rank(unit, when, held.now, by)
        if disk is not None and disk.fits(len(data)):  # a copy for the next run
            job.add(self.to_disk(unit, data, when, by))
        return job

    def use_ahead(self, unit: int, by: Hashable) -> DiskJob:
        """A batch uses what was read ahead for it: it leaves the buffer for a tier."""
        return self.admit(unit, self.held.take_ahead(unit), by)

    def evict_from_memory(self, victims: list[int]) -> DiskJob:
        """Evict ``victims`` from memory; each moves to disk if the disk tier admits it."""
        held = self.held
        job = DiskJob()
        for victim in victims:
            owner = held.memory.order.owner(victim)
            moved = held.memory.take(victim, evicted=True)
            if held.disk is None or victim not in held.disk:
                job.add(self.to_disk(victim, moved, held.next_use(victim), owner))
        return job

    def to_disk(self, unit: int, data: bytes, when: int, by: Hashable) -> DiskJob:
        """Book ``unit`` into the disk tier if it is needed before what it would evict."""
        held = self.held
        disk = held.disk
        job = DiskJob()
        if disk is None or disk.degraded or unit in disk:
            return job
        victims = disk.room_for(len(data), when, sharing=held.sharing(by))
        if victims is None:
            return job
        for victim in victims:
            disk.remove(victim, evicted=True)
            job.deletes.append(disk.paths.pop(victim))
        path = held.disk_path(unit, data)
        disk.add(unit, len(data))
        disk.paths[unit] = path
        disk.rank(unit, when, held.now, by)
        held.writing[unit] = data
        job.writes.append((unit, path, data))
        return job

    async def keep(
        self, arrived: dict[int, bytes], owned: dict[int, Pending], demanded: set[int], by: Hashable
    ) -> DiskJob:
        """Samples used now (by stream ``by``) go to a tier if admitted; samples read
        ahead to the buffer. Soonest needed first."""
        held = self.held
        turn = Turn()
        ordered = []
        for unit in arrived:
            ordered.append((held.next_use(unit), unit))
            await turn.pause_if_due()
        ordered.sort()
        job = DiskJob()
        for _, unit in ordered:
            await turn.pause_if_due()
            data = arrived[unit]
            pending = owned[unit]
            used = unit in demanded or pending.waiters > 0
            if pending.reserved:  # read ahead: its room was made when it was chosen
                pending.reserved = False
                if used or held.holds(unit):
                    held.memory.unreserve(len(data), pending.by)
            if used:
                held.tally.bytes_used += len(data)
                job.add(self.admit(unit, data, by))
            elif not held.holds(unit):
                held.hold_ahead(unit, data, pending.by)  # keeps the room reserved until used
            else:
                held.tally.bytes_dropped += len(data)
        return job

    async def run(self, job: DiskJob) -> None:
        """Delete evicted files, then write new ones, jobs in the order they were decided.

        Behind the steps while a server runs on this loop and fewer than ``BYTES_BEHIND``
        bytes wait there; else now, shielded from cancellation. Each job waits for the one
        before it and deletes before it writes, so the files on disk never exceed the bound
        even while several jobs are in flight. An I/O error degrades the cache to memory
        only (``disk_failed``): the write's bytes are unbooked; the batch is not affected.
        """
        if not job:
            return
        previous = self._disk_tail
        self._disk_tail = done = anyio.Event()  # linked now: jobs keep the order decided
        size = sum(len(data) for _, _, data in job.writes)
        server = self._servers.latest()
        if server is not None and self.bytes_behind + size <= BYTES_BEHIND:
            self.bytes_behind += size
            server.start(self._run_behind, job, previous, done, size)
            return
        with anyio.CancelScope(shield=True):
            await self._run(job, previous, done)

    async def _run_behind(
        self, job: DiskJob, previous: anyio.Event | None, done: anyio.Event, size: int
    ) -> None:
        with anyio.CancelScope(shield=True):  # before any await: a server may be ending
            try:
                await self._run(job, previous, done)
            finally:
                self.bytes_behind -= size

    async def _run(self, job: DiskJob, previous: anyio.Event | None, done: anyio.Event) -> None:
        held = self.held
        disk = held.disk
        assert disk is not None
        failed: list[tuple[int, Path]] = []
        error: OSError | None = None
        try:
            if previous is not None and not previous.is_set():  # (set: maybe another loop's)
                await previous.wait()
            for path in job.deletes:
                try:
                    await disk.delete(path)
                except OSError as exc:
                    error = error or exc
            for unit, path, data in job.writes:
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
            for unit, _, data in job.writes:
                if held.writing.get(unit) is data:
                    del held.writing[unit]
        for unit, path in failed:  # booked when decided: unbooked, never written
            if disk.paths.get(unit) == path:
                disk.remove(unit, evicted=False)
                del disk.paths[unit]
        if error is not None:
            self.disk_failed(error)

    def disk_failed(self, error: OSError) -> None:
        """A disk-tier I/O error: counted, and the tier takes no new entries from now on
        (memory only); the first one warns. Entries already on disk are still read."""
        self.held.tally.disk_errors += 1
        disk = self.held.disk
        if disk is not None and not disk.degraded:
            disk.degraded = True
            warnings.warn(
                f"aioloader: the KnownFutureCache disk tier in {str(disk.directory)!r} failed "
                f"({error}); the cache goes on in memory only",
                RuntimeWarning,
                stacklevel=4,
            )
