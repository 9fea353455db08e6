"""Argument types of every command line in the package (``aioloader`` and its ``ingest``).

A neutral module: ``cli/`` and ``ingest/`` both parse arguments with these, and ``ingest/``
never imports ``cli/`` (docs/architecture.md).
"""

from __future__ import annotations

import argparse


def non_negative(text: str) -> int:
    """An integer >= 0.

    >>> non_negative("3")
    3
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer but got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 but got {value}")
    return value


def positive(text: str) -> int:
    """An integer >= 1."""
    value = non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 but got {value}")
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
