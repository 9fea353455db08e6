"""Containers that every interop conversion must keep (the torch and jax tests share them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple


class Pair(NamedTuple):
    """A named tuple: converted field by field, rebuilt as a ``Pair``."""

    left: Any
    right: Any


@dataclass
class Inner:
    """A dataclass: its fields are converted and it is rebuilt as an ``Inner``."""

    values: Any
    name: str
