"""Argument types, the options several subcommands share, and the one error a subcommand
raises to stop with a message."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from .._argtypes import BACKENDS as BACKENDS
from .._argtypes import non_negative as non_negative
from .._argtypes import options_named as options_named
from .._argtypes import positive as positive
from .._argtypes import positive_float as positive_float
from .._argtypes import run_backend


class CommandError(Exception):
    """A subcommand cannot go on; ``main`` prints ``error: <message>`` and exits with 2."""


def add_option(
    parser: Any, flag: str, kind: Callable[[str], Any], metavar: str, text: str, **more: Any
) -> None:
    """Add the option ``flag`` taking one value, parsed by ``kind``, shown as ``metavar``.

    ``text`` is its help; ``more`` goes to ``add_argument`` as is (``default``, ``required``).
    """
    parser.add_argument(flag, type=kind, metavar=metavar, help=text, **more)


def add_loader_settings(parser: Any, *, workers: int, prefetch: int) -> None:
    """Add ``--workers`` and ``--prefetch``, the settings the loader runs with, to ``parser``."""
    workers_text = f"CPU threads; 0 builds on the event loop (default {workers})"
    add_option(parser, "--workers", non_negative, "N", workers_text, default=workers)
    prefetch_text = f"ring slots (default {prefetch})"
    add_option(parser, "--prefetch", positive, "N", prefetch_text, default=prefetch)


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
    return run_backend(backend)
