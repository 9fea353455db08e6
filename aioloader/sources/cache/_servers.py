"""Where the cache's work behind the steps runs: the task groups of its servers, per loop.

The loader runs the cache's server beside each stream (``KnownFutureCache.serve``). While
one runs on an event loop, work a step hands over (read-ahead fetches, disk writes) is
started in the latest server's task group and in that server's ``contextvars`` context, so
a step's context variables never reach work that outlives it. Without a server (a bare
``get_samples`` call) nothing runs behind: the step does the work itself.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio.abc

from .._concurrency import PerLoop

__all__ = ("Server", "Servers")


@dataclass(eq=False)
class Server:
    """One server's task group, its context, and the work handed to it not yet begun
    (``{id: work}``: its owner releases what is left when the server ends)."""

    group: anyio.abc.TaskGroup
    context: contextvars.Context = field(default_factory=contextvars.copy_context)
    handed: dict[int, Any] = field(default_factory=dict)

    def start(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Start ``func(*args)`` in the group, in the server's context."""
        self.context.run(self._start_soon, func, args)

    def _start_soon(
        self, func: Callable[..., Coroutine[Any, Any, Any]], args: tuple[Any, ...]
    ) -> None:
        self.group.start_soon(func, *args)


class Servers:
    """The servers running on each event loop; the latest one takes new work."""

    def __init__(self) -> None:
        self._servers: PerLoop[list[Server]] = PerLoop(list)

    @contextmanager
    def serving(self, group: anyio.abc.TaskGroup) -> Iterator[Server]:
        """A server on ``group`` takes new work on this loop until the block ends (end the
        block before the group: nothing may start in a group that has ended)."""
        servers = self._servers.get()
        server = Server(group)
        servers.append(server)
        try:
            yield server
        finally:
            servers.remove(server)

    def latest(self) -> Server | None:
        """The server that takes new work on this loop (None: none runs here)."""
        servers = self._servers.get()
        return servers[-1] if servers else None
