"""A training consumer's rows (W9): host batches from a loader, moved to a device, one
training step each, timed between two device synchronisations.

A ``Feed`` reads its batches with ``for`` (``open_sync(stop)``: a context manager over an
iterator) or with ``async for`` (``open_async(stop)``: an async context manager over an
async iterator, consumed in one event loop on uvloop, the step holding the loop as a
trainer's does). ``wrap(batches)`` turns those host batches into batches on the device (a
device stream, or ``PerBatch``: one call per batch) and ``fields(batch)`` reads a batch's
``images`` and ``labels``; without a trainer the rows time the loader alone.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Protocol

import harness
import numpy as np

from systems.aioloader import run_async

FIELDS = ("images", "labels", "indices")
Opener = Callable[[int], contextlib.AbstractContextManager[Iterator[Any]]]
AsyncOpener = Callable[[int], contextlib.AbstractAsyncContextManager[AsyncIterator[Any]]]


class Trainer(Protocol):
    """What a ``Feed`` drives: ``step(images, labels)`` and ``synchronize()`` the device."""

    def step(self, images: Any, labels: Any) -> None: ...

    def synchronize(self) -> None: ...


def fields(batch: Any) -> dict[str, Any]:
    """``FIELDS`` of a batch: a dict's entries, a ``TreeBatch``'s data and indices (as
    arrays or tensors), or attributes."""
    if isinstance(batch, dict):
        return {name: batch[name] for name in FIELDS}
    data = getattr(batch, "data", None)
    if isinstance(data, dict):
        return {**data, "indices": batch.indices}
    return {name: getattr(batch, name) for name in FIELDS}


def host_copy(value: Any) -> np.ndarray[Any, Any]:
    """A numpy copy of a tensor (on any device) or an array."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.array(value, copy=True)


def same_place(batches: Any) -> Any:
    """No move: the batches stay where they are."""
    return batches


class PerBatch:
    """``function(batch)`` for each batch of an iterable or an async iterable."""

    def __init__(self, batches: Any, function: Callable[[Any], Any]) -> None:
        self.batches, self.function = batches, function

    def __iter__(self) -> Iterator[Any]:
        return map(self.function, self.batches)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._map()

    async def _map(self) -> AsyncIterator[Any]:
        async for batch in self.batches:
            yield self.function(batch)


def per_batch(function: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A ``wrap`` that calls ``function`` on each batch."""
    return lambda batches: PerBatch(batches, function)


class Feed(harness.Port):
    """Batches of ``open_sync`` or ``open_async`` through ``wrap``, then ``trainer.step``.

    ``batches(stop)`` gives the moved batches' ``FIELDS`` as numpy copies (what the trainer
    would see), so ``harness.verify`` checks the device path too. ``measure`` returns images
    per second: ``count`` steps after ``warm``, between two ``synchronize()`` calls.
    """

    def __init__(
        self,
        name: str,
        group: str,
        note: str,
        *,
        open_sync: Opener | None = None,
        open_async: AsyncOpener | None = None,
        wrap: Callable[[Any], Any] = same_place,
        trainer: Trainer | None = None,
        batch: int = 1,
    ) -> None:
        if (open_sync is None) == (open_async is None):
            raise TypeError("Feed needs exactly one of open_sync and open_async")
        self.name, self.group, self.note = name, group, note
        self.open_sync, self.open_async = open_sync, open_async
        self.wrap, self.trainer, self.batch = wrap, trainer, batch

    def _consume(self, stop: int, take: Callable[[Any], None]) -> None:
        """``take(batch)`` for each of the ``stop`` batches on the device, then release it;
        the wrapper is closed at the end (a device stream frees its staging)."""
        if self.open_sync is not None:
            with self.open_sync(stop) as batches:
                moved = self.wrap(batches)
                try:
                    for batch in moved:
                        take(batch)
                        self.release(batch)
                finally:
                    _close(moved)
            return
        opener = self.open_async
        assert opener is not None

        async def consume() -> None:
            async with opener(stop) as batches:
                moved = self.wrap(batches)
                try:
                    async for batch in moved:
                        take(batch)
                        self.release(batch)
                finally:
                    _close(moved)

        run_async(consume)

    @contextlib.contextmanager
    def batches(self, stop: int) -> Iterator[Iterator[Any]]:
        collected: list[dict[str, Any]] = []

        def take(batch: Any) -> None:
            moved = fields(batch)
            collected.append({name: host_copy(value) for name, value in moved.items()})

        self._consume(stop, take)
        yield iter(collected)

    def measure(self, warm: int, count: int) -> float:
        clock = {"seen": 0, "started": 0.0, "ended": 0.0}

        def take(batch: Any) -> None:
            if clock["seen"] == warm:
                self._synchronize()
                clock["started"] = time.perf_counter()
            moved = fields(batch)
            if self.trainer is not None:
                self.trainer.step(moved["images"], moved["labels"])
            clock["seen"] += 1
            if clock["seen"] == warm + count:  # the loader's close is not timed
                self._synchronize()
                clock["ended"] = time.perf_counter()

        self._consume(warm + count, take)
        if clock["seen"] != warm + count:
            raise RuntimeError(f"{self.name} gave {clock['seen']} batches, not {warm + count}")
        return self.batch * count / (clock["ended"] - clock["started"])

    def _synchronize(self) -> None:
        if self.trainer is not None:
            self.trainer.synchronize()


def _close(batches: Any) -> None:
    close = getattr(batches, "close", None)
    if callable(close):
        close()


def loader_sync(make: Callable[[], Any]) -> Opener:
    """``stop -> iter_sync(0, stop)`` of a fresh loader from ``make()`` (on uvloop)."""

    @contextlib.contextmanager
    def open_sync(stop: int) -> Iterator[Iterator[Any]]:
        batches = make().iter_sync(0, stop, backend_options={"use_uvloop": True})
        try:
            yield batches
        finally:
            batches.close()

    return open_sync


def loader_async(make: Callable[[], Any]) -> AsyncOpener:
    """``stop -> stream(0, stop)`` of a fresh loader from ``make()``."""

    def open_async(stop: int) -> contextlib.AbstractAsyncContextManager[AsyncIterator[Any]]:
        stream: contextlib.AbstractAsyncContextManager[AsyncIterator[Any]]
        stream = make().stream(0, stop)
        return stream

    return open_async


def loader_feed(name: str, note: str, make: Callable[[], Any], form: str, **settings: Any) -> Feed:
    """An aioloader ``Feed`` over fresh loaders from ``make()``, read with ``form`` (``"for"``:
    ``iter_sync``, ``"async for"``: ``stream``); ``settings``: ``Feed``'s keywords."""
    if form == "for":
        return Feed(name, "aioloader", note, open_sync=loader_sync(make), **settings)
    if form == "async for":
        return Feed(name, "aioloader", note, open_async=loader_async(make), **settings)
    raise ValueError(f"form must be 'for' or 'async for' but got {form!r}")
