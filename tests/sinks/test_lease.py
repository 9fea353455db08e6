"""aioloader.sinks._lease: a lease's ttl is a number of seconds > 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from aioloader.sinks import LocalDestination
from aioloader.sinks._lease import WriterLease


def test_ttl_is_a_positive_number_of_seconds(tmp_path: Path) -> None:
    destination = LocalDestination(tmp_path)
    assert [WriterLease(destination, 2).ttl, WriterLease(destination, 0.5).ttl] == [2.0, 0.5]
    with pytest.raises(ValueError, match=r"^lease ttl must be a number of seconds > 0 but got 0$"):
        WriterLease(destination, 0)
    with pytest.raises(TypeError, match=r"^lease ttl must be a real number but got bool \(True\)$"):
        WriterLease(destination, True)
    with pytest.raises(TypeError, match=r"^lease ttl must be a real number but got str \('60'\)$"):
        WriterLease(destination, "60")  # type: ignore[arg-type]
