"""The parser of every subcommand and ``main``: one line ``error: ...`` for any failure.

A reader that stops early (``aioloader tune ... | head -2``) ends the command quietly,
with status 1 and no traceback: the rest of the output goes nowhere.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, NoReturn

from .._compat import BaseExceptionGroup
from .._errors import AioloaderError
from . import _bench, _demo, _digest, _ingest, _plan, _tune
from ._arguments import CommandError

SUBCOMMANDS = (_demo, _digest, _plan, _tune, _bench, _ingest)

DEBUG_VARIABLE = "AIOLOADER_DEBUG"
"""Set to 1 to get the traceback of an unexpected error instead of one line."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line ``error: ...`` (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand; ``--help`` lists what each accepts."""
    parser = _Parser(
        prog="aioloader",
        description="A deterministic, resumable, asyncio-native data loader for ML training.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    for module in SUBCOMMANDS:
        module.add_parser(commands)
    usages = "\n".join(
        textwrap.fill(
            " ".join(sub.format_usage().split()).removeprefix("usage: ").replace(" [-h]", ""),
            width=88,
            initial_indent="  ",
            subsequent_indent="      ",
            break_on_hyphens=False,
        )
        for sub in commands.choices.values()
    )
    parser.epilog = (
        f"what each command accepts ('aioloader COMMAND --help' explains it):\n{usages}\n\n"
        f"Errors print one line 'error: ...' and exit with status 2; set\n{DEBUG_VARIABLE}=1 "
        "to see the traceback of an unexpected one."
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``aioloader`` and ``python -m aioloader``."""
    try:
        return _run(build_parser().parse_args(argv))
    except BrokenPipeError:  # the reader is gone (``| head``): Python's documented recipe
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the flush at exit cannot fail again
        return 1


def _run(args: argparse.Namespace) -> int:
    try:
        lines: list[str] = args.run(args)
    except BrokenPipeError:
        raise
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if os.environ.get(DEBUG_VARIABLE, "") not in ("", "0"):
            raise
        print(f"error: {describe(error)}", file=sys.stderr)
        return 2
    print("\n".join(lines), flush=True)
    return 0


def describe(error: BaseException) -> str:
    """One line for an exception: its message and notes; the type when it is unexpected.

    >>> describe(ValueError("batch_size must be >= 1 but got 0"))
    'batch_size must be >= 1 but got 0'
    >>> describe(KeyError("x"))
    "KeyError: 'x'"
    """
    more = 0
    while isinstance(error, BaseExceptionGroup):
        more += len(error.exceptions) - 1
        error = error.exceptions[0]
    text = str(error) or type(error).__name__
    if not isinstance(error, (CommandError, ValueError, TypeError, OSError, AioloaderError)):
        text = f"{type(error).__name__}: {text}"
    notes: list[Any] = getattr(error, "__notes__", None) or []
    parts = [text, *(f"({note})" for note in notes)]
    if more:
        parts.append(f"(and {more} more errors)")
    return " ".join(parts).replace("\n", " ")
