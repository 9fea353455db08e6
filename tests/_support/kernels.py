"""Doubles for the compiled kernels' loading: a cache filler and a load that blocks.

``slow_kernels(monkeypatch)`` gives a process whose kernels are not loaded, whose cache
filler says ``filling`` until ``filled()`` is called, and whose kernel load blocks until
the test releases it, then fails (so numpy runs on and nothing compiles, even cold).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from aioloader.kernels import _selection as _backend
from aioloader.kernels._cache import FILLED, FILLING

WITHHELD = "withheld by the test"
"""The failure the load double reports once released."""


class FakeFiller:
    """A cache filler that fills when told to; no child process."""

    def __init__(self, state: str = FILLING) -> None:
        self.state = state
        self.failure: str | None = None
        self.polls = 0

    def filled(self) -> None:
        self.state = FILLED

    @property
    def pid(self) -> None:
        return None

    def poll(self) -> str:
        self.polls += 1
        return self.state

    def wait(self) -> str:
        return self.state

    def compiles(self) -> bool:
        return False

    def stop(self) -> None:
        pass


class BlockingLoad:
    """``load_every_kernel``: records its thread, blocks until ``release`` is set.

    ``on_start`` runs first, in the loading thread (a test may advance a fake clock there).
    """

    def __init__(self, on_start: Callable[[], None] = lambda: None, *, blocks: bool = True):
        self.started = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()
        self.threads: list[int] = []
        self.released = False
        self._on_start = on_start
        if not blocks:
            self.release.set()

    def __call__(self, on_compile: Callable[[], None] | None = None) -> str:
        self.threads.append(threading.get_ident())
        self._on_start()
        self.started.set()
        # a bound, not a synchronisation: a load on the event loop's thread would wait here
        # forever (no heartbeat runs to release it); the test then fails on its counts
        self.released = self.release.wait(timeout=10)
        self.finished.set()
        return WITHHELD


def slow_kernels(
    monkeypatch: pytest.MonkeyPatch, load: BlockingLoad, state: str = FILLING
) -> FakeFiller:
    """Kernels not loaded yet, ``load`` as their loader, a filler in ``state``."""
    filler = FakeFiller(state)
    monkeypatch.setattr(_backend, "_filler", filler)
    monkeypatch.setattr(_backend, "_loaded", None)
    monkeypatch.setattr(_backend, "_failure", None)
    monkeypatch.setattr(_backend, "load_every_kernel", load)
    return filler
