"""Types of the command's test fixtures (``run`` and ``fail`` in conftest.py)."""

from __future__ import annotations

from collections.abc import Callable

Run = Callable[..., str]
"""``run(*argv)``: the standard output of a successful command."""

Fail = Callable[..., str]
"""``fail(*argv)``: the one ``error: ...`` line of a failing command."""
