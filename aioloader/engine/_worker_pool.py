"""The loader's worker processes across streams and epochs (``persistent_workers``).

Persistent (the default for ``executor="process"``): the processes start once, in a thread
(never on the event loop), when the first stream needs them, and serve every later stream,
epoch and event loop. They stop on ``DataLoader.aclose()``, when the loader is garbage
collected, or at interpreter exit (a ``weakref.finalize``). A pool in which a worker died
is replaced by the next stream that starts; the stream that saw the death got an error
naming the worker. Not persistent: every stream starts its own processes and stops them
when it ends, as ``torch``'s ``persistent_workers=False`` does.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from ..core import BatchPlan
from ._build import Transform
from ._processes import ProcessBuilders, ProcessStatistics


class WorkerPool:
    """Hands each stream its ``ProcessBuilders``: the same one while it is healthy."""

    __slots__ = (
        "__weakref__",
        "_builders",
        "_collator",
        "_finalizer",
        "_lock",
        "_reader",
        "_transform",
        "persistent",
        "workers",
    )

    def __init__(
        self,
        workers: int,
        transform: Transform | None,
        collator: Callable[[Sequence[Any], BatchPlan], Any],
        *,
        persistent: bool,
        reader: Callable[[int], Any] | None = None,
    ) -> None:
        self.workers = workers
        self._reader = reader
        self.persistent = persistent
        self._transform = transform
        self._collator = collator
        self._lock = threading.Lock()
        self._builders: ProcessBuilders | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    async def acquire(self) -> ProcessBuilders:
        """The processes for a new stream; started in a thread when there are none."""
        builders = self._builders
        if self.persistent and builders is not None and builders.healthy:
            return builders
        return await anyio.to_thread.run_sync(self._start)

    def _start(self) -> ProcessBuilders:
        if not self.persistent:
            return self._new()
        with self._lock:
            builders = self._builders
            if builders is not None and builders.healthy:
                return builders
            self._stop_locked()
            builders = self._new()
            self._builders = builders
            self._finalizer = weakref.finalize(self, builders.close)
            return builders

    def _new(self) -> ProcessBuilders:
        return ProcessBuilders(self.workers, self._transform, self._collator, reader=self._reader)

    async def release(self, builders: ProcessBuilders) -> None:
        """A stream is done with ``builders``: stop them unless they persist (in a thread)."""
        if builders is self._builders:
            return
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(builders.close)

    def close(self) -> None:
        """Stop the persistent processes (blocking); the next stream starts new ones."""
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        finalizer, self._finalizer, self._builders = self._finalizer, None, None
        if finalizer is not None:
            finalizer()  # closes the builders, once

    def statistics(self) -> ProcessStatistics | None:
        """The persistent processes' counters, or None when none are running."""
        builders = self._builders
        return builders.statistics() if builders is not None else None
