"""aioloader._argtypes: the argument types every command line parses with."""

from __future__ import annotations

import argparse

import pytest

from aioloader._argtypes import (
    BACKENDS,
    non_negative,
    options_named,
    positive,
    positive_float,
    run_backend,
)


def test_integers_are_parsed_and_bounded() -> None:
    assert [non_negative("0"), non_negative("7"), positive("1"), positive("12")] == [0, 7, 1, 12]
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be >= 0 but got -1"):
        non_negative("-1")
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be >= 1 but got 0"):
        positive("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be an integer but got '2.5'"):
        positive("2.5")


def test_positive_floats_are_finite_and_above_zero() -> None:
    assert positive_float("0.25") == 0.25
    for text, message in (
        ("0", "must be a finite number > 0 but got 0"),
        ("inf", "must be a finite number > 0 but got inf"),
        ("x", "must be a number but got 'x'"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            positive_float(text)


@pytest.mark.parametrize("text", ["-5", "-1", "0"])
def test_positive_says_the_same_rule_for_every_value_below_one(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        positive(text)
    assert str(caught.value) == f"must be >= 1 but got {int(text)}"


def test_options_named_hands_over_the_named_options_only() -> None:
    args = argparse.Namespace(seed=3, steps=10, quiet=True, stop=None)
    assert options_named(args, "steps", "stop") == {"steps": 10, "stop": None}
    assert options_named(args) == {}
    with pytest.raises(AttributeError, match="'Namespace' object has no attribute 'start'"):
        options_named(args, "seed", "start")


def test_every_backend_choice_maps_to_anyio_run_arguments() -> None:
    assert [run_backend(name) for name in BACKENDS] == [
        ("asyncio", {}),
        ("asyncio", {"use_uvloop": True}),
        ("trio", {}),
    ]
