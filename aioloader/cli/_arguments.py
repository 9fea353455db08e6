"""Argument types of every subcommand (``ingest`` too), the options several share, the
hand-over of parsed options to the functions they configure, and the one error a
subcommand raises to stop with a message."""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Callable
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
