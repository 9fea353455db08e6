"""Argument types of every command line in the package (``aioloader`` and its ``ingest``),
and the hand-over of parsed options to the functions they configure.

A neutral module: ``cli/`` and ``ingest/`` both parse arguments with these, and ``ingest/``
never imports ``cli/`` (docs/architecture.md).
"""

from __future__ import annotations

import argparse
from typing import Any


def non_negative(text: str) -> int:
    """An integer >= 0.

    >>> non_negative("3")
    3
    """
    return _integer_at_least(text, 0)


def positive(text: str) -> int:
    """An integer >= 1: every value below 1 gets the same message, ``must be >= 1``.

    >>> positive("1")
    1
    """
    return _integer_at_least(text, 1)


def _integer_at_least(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer but got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum} but got {value}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (milliseconds, for example)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number but got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0 but got {text}")
    return value


def options_named(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The parsed options ``names`` of ``args`` by name, for a call whose parameters share them.

    >>> options_named(argparse.Namespace(seed=3, steps=10, quiet=True), "seed", "steps")
    {'seed': 3, 'steps': 10}
    """
    return {name: getattr(args, name) for name in names}


BACKENDS = ("asyncio", "uvloop", "trio")
"""The event loops a ``--backend`` option chooses from."""


def run_backend(backend: str) -> tuple[str, dict[str, Any]]:
    """``(backend, backend_options)`` for ``anyio.run`` of a ``--backend`` choice.

    >>> run_backend("uvloop"), run_backend("trio")
    (('asyncio', {'use_uvloop': True}), ('trio', {}))
    """
    if backend == "uvloop":
        return "asyncio", {"use_uvloop": True}
    return backend, {}
