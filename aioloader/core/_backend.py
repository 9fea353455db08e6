"""Which batch kernels run: the compiled ones (``_kernels``, GIL released) or numpy's.

Both give the same bits, so the choice only changes speed. ``AIOLOADER_KERNELS`` (or
``use_kernels``) picks:

- ``auto`` (default): the first use starts loading the compiled kernels on a background
  thread (numba's import and its on-disk cache: about a second; compilation on a machine
  that never ran them: seconds, once); until they are ready the numpy reference builds
  the batches, so the first batch never waits for numba.
- ``numba``: the first use loads them and waits (tests and benchmarks use this).
- ``numpy``: the reference only.

The loader thread is the only thread the core starts; it runs once per process.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from types import ModuleType

CHOICES = ("auto", "numba", "numpy")
_state_lock = threading.Lock()
_load_lock = threading.Lock()
_choice: str | None = None
_loaded: ModuleType | None = None
_failure: str | None = None
_loader: threading.Thread | None = None


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
    _start_loading()
    return None


def _start_loading() -> None:
    global _loader
    with _state_lock:
        if _loader is not None or _failure is not None:
            return
        # Not a daemon: the interpreter waits for it at exit, since a thread killed inside
        # LLVM while the interpreter finalizes aborts the process (seen on a cold cache).
        _loader = threading.Thread(target=load, name="aioloader-kernels", daemon=False)
        _loader.start()


def load() -> ModuleType | None:
    """Load every compiled kernel now (waits for a load in progress); ``None`` if it failed."""
    global _loaded, _failure
    with _load_lock:
        if _loaded is None and _failure is None:
            _failure = _load_kernels()
            if _failure is None:
                from . import _kernels

                _loaded = _kernels
    return _loaded


def _load_kernels() -> str | None:
    """Import and load every kernel; what went wrong, or ``None``."""
    try:
        from . import _kernels

        if _kernels.HEADER is None:
            return "numpy's array object layout is not the expected one"
        _kernels.load_all()
    except Exception as error:  # numba missing or broken: the reference runs
        return f"{type(error).__name__}: {error}"
    return None


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
