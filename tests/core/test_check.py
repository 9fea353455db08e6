"""aioloader.core._check: argument checks whose messages name the argument, rule and value."""

from __future__ import annotations

import numpy as np
import pytest

from aioloader.core._check import (
    at_least,
    at_least_or_none,
    flag,
    instance_not_bool,
    positive,
    positive_up_to,
    real,
)


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


def test_at_least_states_the_whole_rule_for_every_refusal() -> None:
    assert [at_least("seed", 0, 0), at_least("threads", np.int64(3), 1)] == [0, 3]
    assert type(at_least("threads", np.int64(3), 1)) is int
    with pytest.raises(ValueError, match=r"^threads must be an integer >= 1 but got 0$"):
        at_least("threads", 0, 1)
    with pytest.raises(
        TypeError, match=r"^threads must be an integer >= 1 but got a bool \(True\)$"
    ):
        at_least("threads", True, 1)
    with pytest.raises(TypeError, match=r"^count must be an integer >= 1 but got str \('x'\)$"):
        at_least("count", "x", 1)
    with pytest.raises(TypeError, match=r"^seed must be an integer >= 0 but got float \(1\.0\)$"):
        at_least("seed", 1.0, 0)


def test_at_least_or_none_passes_none_and_names_it_in_the_rule() -> None:
    assert [at_least_or_none("window", None, 1), at_least_or_none("window", 4, 1)] == [None, 4]
    with pytest.raises(ValueError, match=r"^window must be an integer >= 1 or None but got 0$"):
        at_least_or_none("window", 0, 1)
    with pytest.raises(
        TypeError, match=r"^window must be an integer >= 1 or None but got a bool \(False\)$"
    ):
        at_least_or_none("window", False, 1)


def test_real_accepts_python_and_numpy_reals_but_no_bool() -> None:
    values = [3, 2.5, np.int8(-1), np.float32(0.5)]
    assert [real("mean", v) for v in values] == values
    for refused, shown in [
        (True, r"bool \(True\)"),
        (np.True_, r"bool \(np\.True_\)"),
        ("1", r"str \('1'\)"),
        (np.complex64(1), r"complex64 \(.*\)"),
        (None, r"NoneType \(None\)"),
    ]:
        with pytest.raises(TypeError, match=rf"^mean must be a real number but got ({shown})$"):
            real("mean", refused)


def test_instance_not_bool_names_the_kinds_it_wanted() -> None:
    assert instance_not_bool("device", "cpu", (str, int), "a str or an int") == "cpu"
    assert instance_not_bool("device", 1, (str, int), "a str or an int") == 1
    with pytest.raises(TypeError, match=r"^device must be a str or an int but got bool \(False\)$"):
        instance_not_bool("device", False, (str, int), "a str or an int")
    with pytest.raises(TypeError, match=r"^device must be a str or an int but got float \(1\.0\)$"):
        instance_not_bool("device", 1.0, (str, int), "a str or an int")
