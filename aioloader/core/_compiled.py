"""Where the core finds the compiled batch kernels: a slot that ``aioloader.kernels`` fills.

The core only calls kernels; compiling, caching, loading and choosing them is the kernels
unit's work (it starts a process, takes lock files, loads in threads), so the core never
imports it. When that unit is imported (``import aioloader`` does it) it installs its
choice here; until then, or when it chooses numpy, ``compiled()`` is ``None`` and the numpy
reference runs. Both give the same bits, so the slot only changes speed.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

Provider = Callable[[], ModuleType | None]
"""The kernels module when it is to run now, else ``None``; never blocks on an event loop."""


def _none() -> ModuleType | None:
    return None


def _numpy() -> str:
    return "numpy"


_batch: Provider = _none
_image_chain: Provider = _none
_load: Callable[[], str] = _numpy


def install_kernels(batch: Provider, image_chain: Provider, load: Callable[[], str]) -> None:
    """Fill the slot: the batch kernels, the image chain's kernel and the warm-up."""
    global _batch, _image_chain, _load
    _batch, _image_chain, _load = batch, image_chain, load


def compiled() -> ModuleType | None:
    """The compiled batch kernels when they are to run now, else ``None`` (numpy runs)."""
    return _batch()


def compiled_image_chain() -> ModuleType | None:
    """The compiled crop-resize kernel's module when it is to run now, else ``None``."""
    return _image_chain()


def load_kernels() -> str:
    """Load the compiled batch kernels now, on this thread; the kernels batches will use.

    A warm-up for those who want it: call it before the event loop starts (or in a worker
    thread, ``await anyio.to_thread.run_sync(load_kernels)``) and no batch runs on numpy
    while the kernels load. It waits for their compilation on a machine that never ran
    them (seconds, once), else loads them from numba's cache (about half a second). With
    ``AIOLOADER_KERNELS=numpy`` it does nothing and numba is never imported.

    Returns:
        ``"numba"`` when the compiled kernels will run, else ``"numpy"`` (``numpy`` was
        chosen, or they could not load).
    """
    return _load()
