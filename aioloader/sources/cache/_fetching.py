"""Fetching: samples on their way merged into range requests, read, and handed to admission.

Samples of one shard with only non-sample bytes (tar headers, skipped members) between
them, at most ``coalesce_gap``, are one request; within one run chosen to be read, so are
samples with only held samples between them (their bytes count as ``bytes_between``).
Requests start ``TASKS_PER_TURN`` at a time: spawning thousands of tasks takes a while.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable

import anyio

from .._concurrency import gather_ordered
from ._admission import Admission, DiskJob
from ._held import Holdings
from ._planner import NEVER
from ._ranges import ByteRange
from ._room import between_held
from ._turns import Pending, Turn

__all__ = ("TASKS_PER_TURN", "Fetcher")

TASKS_PER_TURN = 64
"""Reads started in one event-loop turn."""

_Request = tuple[ByteRange, list[int]]


class Fetcher:
    """Reads samples already marked on their way, and settles them when the reads end."""

    def __init__(self, held: Holdings, admission: Admission, gap: int, most: int) -> None:
        self.held = held
        self.admission = admission
        self.coalesce_gap = gap
        self.max_request_bytes = most

    async def fetch(
        self,
        need: dict[int, Pending],
        ahead: dict[int, Pending],
        by: Hashable,
        *,
        behind: bool = False,
        exact: bool = False,
    ) -> dict[int, bytes]:
        """Read ``need`` (for a batch of stream ``by``) and ``ahead``; returns ``need``'s bytes.

        ``behind``: a fetch behind the steps, whose runs also pass over samples on their way
        in other requests (a step's misses, read exactly before their run). ``exact``: a
        step's misses read without their runs, merged across any gap of at most
        ``coalesce_gap`` bytes whose samples are held, on their way, or read later in the
        stream's epoch (never samples it already used).

        A sample's waiters go on as soon as its request arrives. When the reads end (also
        by failure or cancellation), what arrived is admitted or held as read-ahead, every
        sample is released (waiters of one that never arrived see None), and the disk work
        runs, shielded.
        """
        held = self.held
        source = held.bound_source()
        owned = {**need, **ahead}
        arrived: dict[int, bytes] = {}

        async def read_one(request: _Request) -> None:
            (key, start, end), members = request
            data = await source.read_range(key, start, end)
            tally = held.tally
            tally.requests += 1
            tally.bytes_fetched += len(data)
            carried = 0
            turn = Turn()
            for unit in members:
                await turn.pause_if_due()
                _, begin, stop = source.span_of(unit)
                piece = data[begin - start : stop - start]
                carried += len(piece)
                arrived[unit] = owned[unit].data = piece
                owned[unit].finish()  # its waiters go on now, not when every read ends
            tally.bytes_between += len(data) - carried  # headers, samples held passed over

        async def read_some(some: list[_Request]) -> None:
            await gather_ordered(read_one, some)

        try:
            passable = held.is_passable if behind else held.holds
            if exact:  # past samples the stream reads later anyway, never past used ones
                passable = functools.partial(_read_later, held)
            requests = await self.requests(owned, passable, exact=exact)
            turns = [
                requests[k : k + TASKS_PER_TURN] for k in range(0, len(requests), TASKS_PER_TURN)
            ]
            await gather_ordered(read_some, turns)
        finally:
            job = await self._settle(arrived, owned, set(need), by)
            await self.admission.run(job)
        return {unit: arrived[unit] for unit in need}

    async def _settle(
        self,
        arrived: dict[int, bytes],
        owned: dict[int, Pending],
        demanded: set[int],
        by: Hashable,
    ) -> DiskJob:
        """Admit or hold what arrived (shielded), then release every sample."""
        with anyio.CancelScope(shield=True):
            job = await self.admission.keep(arrived, owned, demanded, by)
        for unit, pending in owned.items():
            self.held.release(unit, pending)
        return job

    async def requests(
        self, owned: dict[int, Pending], passable: Callable[[int], bool], *, exact: bool = False
    ) -> list[_Request]:
        """The samples ``owned`` merged into requests across gaps of at most
        ``coalesce_gap`` bytes that hold no sample, or (within one run chosen to be read)
        only samples ``passable`` (held): their bytes count as between; ``exact``: across any
        gap of at most ``coalesce_gap`` bytes of samples ``passable``."""
        held = self.held
        source = held.bound_source()
        turn = Turn()
        spans = []
        for unit in owned:
            spans.append((source.span_of(unit), unit))
            await turn.pause_if_due()
        spans.sort()
        merged: list[_Request] = []
        for (key, start, end), unit in spans:
            await turn.pause_if_due()
            if merged:
                (last_key, last_start, last_end), members = merged[-1]
                if (
                    last_key == key
                    and 0 <= start - last_end <= self.coalesce_gap
                    and end - last_start <= self.max_request_bytes
                    and (
                        all(map(passable, source.indices_within(key, last_end, start)))
                        if exact
                        else between_held(source, passable, (key, last_end, start), owned, unit)
                    )
                ):
                    merged[-1] = ((key, last_start, max(end, last_end)), [*members, unit])
                    continue
            merged.append(((key, start, end), [unit]))
        return merged


def _read_later(held: Holdings, unit: int) -> bool:
    """Held, on its way, or read later by a plan's epoch (not its next pass)."""
    return held.is_passable(unit) or held.plans.next_use(unit, passes=False) < NEVER
