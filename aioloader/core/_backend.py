"""Which batch kernels run: the compiled ones (``_kernels``, GIL released) or numpy's.

Both give the same bits, so the choice only changes speed. ``AIOLOADER_KERNELS`` (or
``use_kernels``) picks:

- ``auto`` (default): the first use starts a child process that fills numba's on-disk cache
  (``_kernel_cache``: it compiles on a machine that never ran the kernels, seconds, once;
  else it finds them cached); until it is done the numpy reference builds the batches, so
  no batch waits for the compiler and no thread of ours compiles. The first use after the
  child is done loads the kernels from the cache on the calling thread (numba's import and
  tens of milliseconds per kernel); another thread asking meanwhile gets numpy.
- ``numba``: the first use loads them and waits (tests and benchmarks use this); a child
  filling the cache is waited for first, so the kernels compile once.
- ``numpy``: the reference only.

The core starts no thread; the child is killed at exit, so an exit never waits for LLVM.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from types import ModuleType

from ._kernel_cache import FAILED, FILLING, Filler, load_every_kernel

CHOICES = ("auto", "numba", "numpy")
_load_lock = threading.Lock()
_choice: str | None = None
_loaded: ModuleType | None = None
_failure: str | None = None
_filler = Filler()


def _check(name: str, value: object) -> str:
    if not isinstance(value, str) or value not in CHOICES:
        raise ValueError(f"{name} must be 'auto', 'numba' or 'numpy' but got {value!r}")
    return value


def chosen() -> str:
    """The kernels asked for: ``use_kernels``, else ``AIOLOADER_KERNELS``, else ``auto``."""
    if _choice is not None:
        return _choice
    return _check("AIOLOADER_KERNELS", os.environ.get("AIOLOADER_KERNELS", "auto"))


def compiled() -> ModuleType | None:
    """The compiled kernels module when it is to run now, else ``None`` (numpy runs)."""
    choice = chosen()
    if choice == "numpy":
        return None
    if _loaded is not None:
        return _loaded
    if choice == "numba":
        return load()
    return _load_once_cached()


def _load_once_cached() -> ModuleType | None:
    """``auto``: the kernels once the child has filled the cache; ``None`` until then."""
    if _failure is not None:
        return None
    state = _filler.poll()
    if state == FILLING:
        return None
    if state == FAILED:
        _fail(_filler.failure)
        return None
    if not _load_lock.acquire(blocking=False):  # another thread loads them: numpy meanwhile
        return None
    try:
        _load_here()
    finally:
        _load_lock.release()
    return _loaded


def load() -> ModuleType | None:
    """Load every compiled kernel now (waits for a load in progress); ``None`` if it failed.

    A child filling the cache is waited for first, so that the kernels compile once.
    """
    if _loaded is None and _failure is None:
        _filler.wait()
    with _load_lock:
        _load_here()
    return _loaded


def _load_here() -> None:
    """Load the kernels in this process (the caller holds ``_load_lock``)."""
    global _loaded
    if _loaded is None and _failure is None:
        _fail(load_every_kernel())
        if _failure is None:
            from . import _kernels

            _loaded = _kernels


def _fail(failure: str | None) -> None:
    global _failure
    if failure is not None and _failure is None:
        _failure = failure


def filler_pid() -> int | None:
    """The process id of the child filling the cache, while it runs (for checks)."""
    return _filler.pid


def active() -> str:
    """``"numba"`` when the compiled kernels would run now, else ``"numpy"``."""
    return "numba" if compiled() is not None else "numpy"


def failure() -> str | None:
    """Why the compiled kernels could not load, if they could not."""
    return _failure


@contextlib.contextmanager
def use_kernels(name: str) -> Iterator[None]:
    """Run the given kernels inside the block (process-wide; meant for tests and checks)."""
    global _choice
    _check("kernels", name)
    previous = _choice
    _choice = name
    try:
        yield
    finally:
        _choice = previous
