"""Which batch kernels run: the compiled ones (``_batch``, GIL released) or numpy's.

Both give the same bits, so the choice only changes speed. ``AIOLOADER_KERNELS`` (or
``use_kernels``) picks:

- ``auto`` (default): the first use starts a child process that fills numba's on-disk cache
  (``_cache``: it compiles on a machine that never ran the kernels, seconds, once;
  else it finds them cached); until it is done the numpy reference builds the batches, so
  no batch waits for the compiler and no thread of ours compiles. The first use after the
  child is done loads the kernels from the cache on the calling thread (numba's import and
  tens of milliseconds per kernel, about 0.5 s in all); another thread asking meanwhile
  gets numpy.
- ``numba``: the first use loads them and waits (tests and benchmarks use this); a child
  filling the cache is waited for first, so the kernels compile once.
- ``numpy``: the reference only.

A thread that runs an event loop must never load them: inside ``loading_elsewhere()``
``compiled()`` only returns kernels already loaded, and the engine loads them in a worker
thread when ``to_load()`` says so (``load_kernels()`` does it ahead, for those who want it).
No thread of ours loads or compiles unasked; the child is killed at exit, so an exit never
waits for LLVM.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from types import ModuleType

from ._cache import FAILED, FILLED, FILLING, Filler, load_every_kernel

CHOICES = ("auto", "numba", "numpy")
_load_lock = threading.Lock()
_choice: str | None = None
_loaded: ModuleType | None = None
_failure: str | None = None
_filler = Filler()
_here = threading.local()  # ``elsewhere``: this thread runs an event loop, never loads


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
    if getattr(_here, "elsewhere", False):  # an event loop's thread: numpy until loaded
        if choice == "auto" and _failure is None:
            _filler.poll()  # the first use starts the child
        return None
    if choice == "numba":
        return load()
    return _load_once_cached()


@contextlib.contextmanager
def loading_elsewhere() -> Iterator[None]:
    """Inside, ``compiled()`` never loads the kernels on this thread (it runs an event loop).

    It returns them once another thread has loaded them, ``None`` (numpy) until then; the
    caller loads them in another thread when ``to_load()`` says so.
    """
    previous = getattr(_here, "elsewhere", False)
    _here.elsewhere = True
    try:
        yield
    finally:
        _here.elsewhere = previous


def to_load() -> bool:
    """Whether ``load()`` is due now; never blocks (it starts the child if need be).

    ``numba``: until the kernels are loaded (``load()`` may then wait for a compilation).
    ``auto``: once the child has filled the cache, so that ``load()`` compiles nothing.
    ``False`` while another thread loads them, once they are loaded or failed, and for numpy.
    """
    choice = chosen()
    if choice == "numpy" or _loaded is not None or _failure is not None:
        return False
    if _load_lock.locked():
        return False
    if choice == "numba":
        return True
    state = _filler.poll()
    if state == FAILED:
        _fail(_filler.failure)
    return state == FILLED


def settled() -> bool:
    """Whether nothing is left to load: the compiled kernels are loaded, or
    ``use_kernels("numpy")`` is in force. A hot path may then skip ``to_load()`` and
    ``loading_elsewhere()``."""
    return _loaded is not None or _choice == "numpy"


def load_kernels() -> str:
    """Load the compiled kernels now, on this thread: ``"numba"`` or ``"numpy"``.

    The warm-up behind ``aioloader.load_kernels`` (whose docstring says what it does and
    when to call it); ``failure()`` says why the kernels could not load, if they could not.
    """
    if chosen() == "numpy":
        return "numpy"
    if _loaded is None and _failure is None:
        _filler.poll()  # compile in the child (one compilation per cache), not here
        load()
    return active()


def compiles() -> bool:
    """Whether loading the kernels compiles them first (a machine that never ran them).

    Starts the child filling the cache if need be and waits until it knows: it waits only
    while the child takes its turn and finds the kernels in the cache. ``False`` once they
    are loaded or failed, and for numpy.
    """
    if chosen() == "numpy" or _loaded is not None or _failure is not None:
        return False
    if _filler.poll() != FILLING:
        return False
    return _filler.compiles()


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
            from . import _batch

            _loaded = _batch


def _fail(failure: str | None) -> None:
    global _failure
    if failure is not None and _failure is None:
        _failure = failure


def filler_pid() -> int | None:
    """The process id of the child filling the cache, while it runs (for checks)."""
    return _filler.pid


def compiled_image_chain() -> ModuleType | None:
    """The crop-resize kernel's module when the compiled kernels are to run now, else ``None``."""
    if compiled() is None:
        return None
    from . import _image_chain

    return _image_chain


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
