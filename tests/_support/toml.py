"""``tomllib`` on every supported Python (``tomli`` before 3.11), to read pyproject.toml."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["tomllib"]
