"""aioloader.kernels._selection: which kernels run, and that loading them starts no thread."""

from __future__ import annotations

import os
import threading

import pytest

from aioloader.kernels import _batch as _kernels
from aioloader.kernels import _selection as _backend
from aioloader.kernels._cache import FILLED, FILLED_MARK, FILLING, Filler, lock_path
from tests._support.kernels import WITHHELD, BlockingLoad, slow_kernels


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Filler:
    """A process whose kernels are not loaded yet and whose cache filler has not started."""
    _backend.load()  # the cache holds every kernel: the child below only loads them
    monkeypatch.delenv(FILLED_MARK, raising=False)
    filler = Filler()
    monkeypatch.setattr(_backend, "_filler", filler)
    monkeypatch.setattr(_backend, "_loaded", None)
    return filler


def started_since(threads: list[threading.Thread]) -> list[threading.Thread]:
    """Threads alive now that were not in ``threads`` (ones that ended do not count)."""
    return [thread for thread in threading.enumerate() if thread not in threads]


def test_auto_serves_numpy_until_the_child_has_filled_the_cache(fresh: Filler) -> None:
    threads = threading.enumerate()
    with _backend.use_kernels("auto"):
        assert _backend.compiled() is None  # the first batch does not wait
        assert _backend.active() == "numpy"
        assert _backend.filler_pid() is not None
        assert started_since(threads) == []  # the child compiles; no thread of ours
        assert fresh.wait() == FILLED
        assert _backend.filler_pid() is None
        assert _backend.compiled() is _kernels  # loaded from the cache on this thread
    assert started_since(threads) == []
    assert _backend.failure() is None


def test_numba_waits_for_a_filling_child_then_loads(fresh: Filler) -> None:
    assert fresh.poll() == FILLING
    with _backend.use_kernels("numba"):
        assert _backend.compiled() is _kernels
    assert fresh.poll() == FILLED  # waited for, not raced: the kernels compile once


def test_numpy_never_starts_the_child(fresh: Filler) -> None:
    with _backend.use_kernels("numpy"):
        assert _backend.compiled() is None
        assert _backend.active() == "numpy"
    assert _backend.filler_pid() is None


def test_a_failed_fill_leaves_numpy_running(fresh: Filler, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_backend, "_failure", None)
    fresh.poll()
    fresh.stop()
    with _backend.use_kernels("auto"):
        assert _backend.compiled() is None
    assert _backend.failure() == "stopped before the cache was filled"


def test_a_process_started_after_the_fill_needs_no_child(
    fresh: Filler, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert fresh.poll() == FILLING
    assert fresh.wait() == FILLED
    assert os.environ[FILLED_MARK] == lock_path()  # inherited by worker processes
    later = Filler()  # as in a worker process started now
    assert later.poll() == FILLED
    assert later.pid is None
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/another/cache")
    other = Filler()
    assert other.poll() == FILLING  # another cache: a child of its own
    other.stop()


def test_to_load_is_due_once_loading_compiles_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    load = BlockingLoad(blocks=False)
    filler = slow_kernels(monkeypatch, load)
    with _backend.use_kernels("numpy"):
        assert _backend.to_load() is False
    with _backend.use_kernels("auto"):
        assert _backend.to_load() is False  # the child still fills the cache
        filler.filled()
        assert _backend.to_load() is True
        assert load.threads == []  # to_load() never loads
        assert _backend.load() is None
        assert _backend.to_load() is False  # done (here: failed)
    assert _backend.failure() == WITHHELD


def test_numba_is_due_until_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    slow_kernels(monkeypatch, BlockingLoad(blocks=False))
    with _backend.use_kernels("numba"):
        assert _backend.to_load() is True  # load() then waits for the child, or compiles


def test_loading_elsewhere_never_loads_on_this_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    load = BlockingLoad(blocks=False)
    filler = slow_kernels(monkeypatch, load, FILLED)
    with _backend.use_kernels("auto"):
        with _backend.loading_elsewhere():
            assert _backend.compiled() is None
            assert filler.polls == 1  # the first use still starts the child
        assert load.threads == []
        assert _backend.compiled() is None  # outside: loads here (and the double fails)
    assert load.threads == [threading.get_ident()]


def test_load_kernels_warms_up_on_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    load = BlockingLoad(blocks=False)
    filler = slow_kernels(monkeypatch, load)
    with _backend.use_kernels("numpy"):
        assert _backend.load_kernels() == "numpy"
    assert (load.threads, filler.polls) == ([], 0)  # numpy: numba is never imported
    filler.filled()
    with _backend.use_kernels("auto"):
        assert _backend.load_kernels() == "numpy"  # the double fails
    assert load.threads == [threading.get_ident()]
    assert _backend.failure() == WITHHELD


def test_load_kernels_returns_numba_once_loaded(fresh: Filler) -> None:
    with _backend.use_kernels("auto"):
        assert _backend.compiles() is False  # the cache holds them: no compilation
        assert _backend.load_kernels() == "numba"
        assert _backend.compiled() is _kernels
        assert _backend.compiles() is False
