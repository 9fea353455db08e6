"""Read-ahead fetched behind the steps, so that a step awaits only its own samples.

A step chooses what to read ahead for the steps after it (``_readahead``) and marks it on
its way at once; who fetches it is decided here. While a server runs on the event loop
(``serve``: the loader runs one for each stream, through the source's ``serve_reads``),
read-ahead is fetched in the server's task group and the step returns as soon as its own
samples are in: its first batch costs a few ranged GETs, with the whole-shard reads
started behind them. Without a server (a bare ``get_samples`` call) the step fetches its
read-ahead with its own reads, as it must: nothing else would.

At a stream's first step the read-ahead is held back until the step's own samples are in
and another read begins (``let_go``): a loader reads the next steps once the first batch
is built, so the first batch has the bandwidth and the CPU to itself; a read that waits for
a sample held back lets it go at once, so no read ever waits on a read not begun.

A read-ahead fetch that fails or is cancelled releases its samples: a step waiting for one
reads it again itself, so the error (if it is one) reaches the step that needs the sample,
and no other step fails for it.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable

import anyio
import anyio.abc

from .._concurrency import PerLoop
from ._fetching import Fetcher
from ._held import Holdings
from ._servers import Servers
from ._turns import Pending

__all__ = ("Behind",)

logger = logging.getLogger("aioloader")

_Handed = dict[int, dict[int, Pending]]


class Behind:
    """Fetches read-ahead in the task group of a server running on the loop."""

    def __init__(self, held: Holdings, fetcher: Fetcher, servers: Servers) -> None:
        self._held = held
        self._fetcher = fetcher
        self._servers = servers
        self._held_back: PerLoop[list[anyio.Event]] = PerLoop(list)

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Fetch read-ahead handed over on this loop until cancelled; then release what
        was handed over and never fetched. Several servers may run: the latest takes the
        new work. Its fetches run in the server's context (``contextvars``), not in that of
        the step that handed them over: a step's context variables never reach work that
        outlives it."""
        handed: _Handed = {}
        try:
            async with anyio.create_task_group() as group:
                with self._servers.serving(group) as server:
                    handed = server.handed
                    task_status.started()
                    await anyio.sleep_forever()
        finally:
            for ahead in handed.values():  # cancelled before its fetch began
                for unit, pending in ahead.items():
                    self._held.release(unit, pending)

    def hand_over(
        self, ahead: dict[int, Pending], by: Hashable, after: anyio.Event | None = None
    ) -> bool:
        """Fetch ``ahead`` (read ahead for stream ``by``) behind the step; given ``after``,
        once it is set and another read has begun (``let_go``). False when no server runs
        on this loop (the step then fetches it itself)."""
        server = self._servers.latest()
        if server is None:
            return False
        handed = server.handed
        handed[id(ahead)] = ahead
        waits: tuple[anyio.Event, ...] = ()
        if after is not None:
            held_back = anyio.Event()
            self._held_back.get().append(held_back)
            waits = (after, held_back)
        server.start(self._fetch, ahead, by, handed, waits)
        return True

    def let_go(self) -> None:
        """A read begins, or waits for samples on their way: read-ahead held back on this
        loop goes now (once what it waits for besides is set)."""
        held_back = self._held_back.get()
        for event in held_back:
            event.set()
        held_back.clear()

    async def _fetch(
        self,
        ahead: dict[int, Pending],
        by: Hashable,
        handed: _Handed,
        waits: tuple[anyio.Event, ...],
    ) -> None:
        try:
            for event in waits:
                await event.wait()
            await self._fetcher.fetch({}, ahead, by, behind=True)
        except Exception as error:  # its samples are released: their steps read them
            logger.info("aioloader: a read-ahead fetch failed (its steps read again): %r", error)
        finally:
            handed.pop(id(ahead), None)
