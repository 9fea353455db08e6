"""Argument types, the options several subcommands share, and the one error a subcommand
raises to stop with a message."""

from __future__ import annotations

import importlib.util
from typing import Any

from .._argtypes import non_negative as non_negative
from .._argtypes import options_named as options_named
from .._argtypes import positive as positive
from .._argtypes import positive_float as positive_float


class CommandError(Exception):
    """A subcommand cannot go on; ``main`` prints ``error: <message>`` and exits with 2."""


BACKENDS = ("asyncio", "uvloop", "trio")


def add_loader_settings(parser: Any, *, workers: int, prefetch: int) -> None:
    """Add ``--workers`` and ``--prefetch``, the settings the loader runs with, to ``parser``."""
    parser.add_argument(
        "--workers",
        type=non_negative,
        default=workers,
        metavar="N",
        help=f"CPU threads; 0 builds on the event loop (default {workers})",
    )
    parser.add_argument(
        "--prefetch",
        type=positive,
        default=prefetch,
        metavar="N",
        help=f"ring slots (default {prefetch})",
    )


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
