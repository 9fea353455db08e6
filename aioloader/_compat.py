"""Small shims for Python 3.10."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import builtins

    BaseExceptionGroup = builtins.BaseExceptionGroup
else:  # pragma: no cover - exercised on 3.10 only
    from exceptiongroup import BaseExceptionGroup


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``, also on Python 3.10."""
    if sys.version_info >= (3, 11):
        error.add_note(note)
    else:  # pragma: no cover - exercised on 3.10 only
        notes = getattr(error, "__notes__", None)
        if notes is None:
            notes = []
            error.__notes__ = notes  # type: ignore[attr-defined]
        notes.append(note)


__all__ = ("BaseExceptionGroup", "add_note")
