"""aioloader.core._check: argument checks whose messages name the argument, rule and value."""

from __future__ import annotations

import numpy as np
import pytest

from aioloader.core._check import flag, positive, positive_up_to


def test_positive_accepts_integers_from_one_up() -> None:
    assert [positive("n", 1), positive("n", np.int64(7)), positive("n", 1 << 70)] == [
        1,
        7,
        1 << 70,
    ]
    with pytest.raises(ValueError, match=r"^max_samples must be >= 1 but got 0$"):
        positive("max_samples", 0)
    with pytest.raises(TypeError, match=r"^size must be an integer but got float \(2\.5\)$"):
        positive("size", 2.5)
    with pytest.raises(TypeError, match=r"^size must be an integer but got a bool \(True\)$"):
        positive("size", True)


def test_positive_up_to_includes_its_limit() -> None:
    assert [positive_up_to("prefetch", 1, 8), positive_up_to("prefetch", 8, 8)] == [1, 8]
    with pytest.raises(ValueError, match=r"^prefetch must be an integer in \[1, 8\] but got 9$"):
        positive_up_to("prefetch", 9, 8)
    with pytest.raises(ValueError, match=r"^prefetch must be an integer in \[1, 8\] but got 0$"):
        positive_up_to("prefetch", 0, 8)


def test_flag_accepts_only_bools() -> None:
    assert [flag("drop_last", True), flag("drop_last", False)] == [True, False]
    with pytest.raises(TypeError, match=r"^shuffle must be a bool but got int$"):
        flag("shuffle", 1)
    with pytest.raises(TypeError, match=r"^validate must be a bool but got NoneType$"):
        flag("validate", None)
