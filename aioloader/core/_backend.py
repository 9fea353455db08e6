"""Which batch kernels run: the compiled ones (``_kernels``, GIL released) or numpy's.

The compiled kernels load on first use (importing numba and reading its on-disk cache, or
compiling once per machine). ``AIOLOADER_KERNELS=numpy`` in the environment, or
``use_kernels("numpy")``, keeps the numpy reference; both give the same bits.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from types import ModuleType

CHOICES = ("numba", "numpy")
_lock = threading.Lock()
_choice: str | None = None
_loaded: ModuleType | None = None
_failure: str | None = None


def _check(name: str, value: object) -> str:
    if not isinstance(value, str) or value not in CHOICES:
        raise ValueError(f"{name} must be 'numba' or 'numpy' but got {value!r}")
    return value


def chosen() -> str:
    """The kernels asked for: ``use_kernels``, else ``AIOLOADER_KERNELS``, else numba."""
    if _choice is not None:
        return _choice
    return _check("AIOLOADER_KERNELS", os.environ.get("AIOLOADER_KERNELS", "numba"))


def compiled() -> ModuleType | None:
    """The compiled kernels module, or ``None`` when the numpy reference is to run."""
    if chosen() != "numba":
        return None
    return _loaded if _loaded is not None else _load()


def _load() -> ModuleType | None:
    global _loaded, _failure
    with _lock:
        if _loaded is None and _failure is None:
            try:
                from . import _kernels
            except ImportError as error:  # numba missing or broken: the reference runs
                _failure = f"{type(error).__name__}: {error}"
            else:
                if _kernels.HEADER is None:
                    _failure = "numpy's array object layout is not the expected one"
                else:
                    _loaded = _kernels
    return _loaded


def active() -> str:
    """``"numba"`` when the compiled kernels run, else ``"numpy"`` (loads them if needed)."""
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
