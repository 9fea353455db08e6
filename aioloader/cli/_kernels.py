"""The batch kernels for a command that measures: loaded before its clock starts, named."""

from __future__ import annotations

import sys

from .. import kernels as selection

COMPILING = "compiling the batch kernels (once per machine and numba version: seconds)"
"""Printed to standard error when, and only when, the kernels compile before they load."""


def ready_kernels() -> tuple[str, str]:
    """Load the compiled kernels now; which kernels batches will use, and why.

    Says so on standard error first when they must compile (a machine that never ran
    them); a warm cache loads them silently.

    Returns:
        ``("numba", why)`` or ``("numpy", why)``.
    """
    if selection.compiles():
        print(COMPILING, file=sys.stderr, flush=True)
    kernels = selection.load_kernels()
    return kernels, kernels_note(kernels)


def kernels_note(kernels: str) -> str:
    """Why ``kernels`` run: chosen, failed to load, or loaded from numba's cache."""
    if selection.chosen() == "numpy":
        return "AIOLOADER_KERNELS=numpy"
    if kernels == "numpy":
        return f"the compiled kernels could not load: {selection.failure()}"
    return "compiled once per machine, then loaded from numba's cache"
