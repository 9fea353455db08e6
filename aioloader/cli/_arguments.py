"""Argument types and the one error a subcommand raises to stop with a message."""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any


class CommandError(Exception):
    """A subcommand cannot go on; ``main`` prints ``error: <message>`` and exits with 2."""


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


BACKENDS = ("asyncio", "uvloop", "trio")


def default_backend() -> str:
    """``"uvloop"`` where it is installed (the fastest measured setting), else ``"asyncio"``."""
    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


def backend_arguments(backend: str) -> tuple[str, dict[str, Any]]:
    """``(backend, backend_options)`` for ``anyio.run``, or a ``CommandError`` naming the
    package to install when the event loop's package is missing."""
    package = {"uvloop": "uvloop", "trio": "trio"}.get(backend)
    if package is not None and importlib.util.find_spec(package) is None:
        raise CommandError(
            f"--backend {backend} needs the {package} package, which is not installed "
            f"(pip install {package})"
        )
    if backend == "uvloop":
        return "asyncio", {"use_uvloop": True}
    return backend, {}


def release(batch: Any) -> None:
    """Return a pooled batch's buffers (batches without ``release`` are left alone)."""
    method = getattr(batch, "release", None)
    if callable(method):
        method()
