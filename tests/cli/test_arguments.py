"""aioloader.cli._arguments: argument types, and options several subcommands declare alike."""

from __future__ import annotations

import argparse
from typing import NoReturn

import pytest

from aioloader.cli._arguments import (
    BACKENDS,
    add_loader_settings,
    add_option,
    non_negative,
    options_named,
    positive,
    positive_float,
    run_backend,
)


class _UsageError(Exception):
    """What argparse would have printed before exiting."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def test_an_option_takes_one_value_of_its_kind() -> None:
    parser = _Parser(prog="x")
    add_option(parser, "--size", positive, "B", "items per batch", required=True)
    add_option(parser, "--pool", positive, "N", "pool size", default=100)
    assert vars(parser.parse_args(["--size", "8"])) == {"size": 8, "pool": 100}
    assert parser.format_usage() == "usage: x [-h] --size B [--pool N]\n"
    with pytest.raises(_UsageError, match=r"^argument --size: must be >= 1 but got 0$"):
        parser.parse_args(["--size", "0"])
    with pytest.raises(_UsageError, match=r"^the following arguments are required: --size$"):
        parser.parse_args([])


def test_loader_settings_are_workers_and_prefetch_with_their_defaults() -> None:
    parser = _Parser(prog="x")
    add_loader_settings(parser, workers=2, prefetch=8)
    assert vars(parser.parse_args([])) == {"workers": 2, "prefetch": 8}
    assert vars(parser.parse_args(["--workers", "0", "--prefetch", "1"])) == {
        "workers": 0,
        "prefetch": 1,
    }
    described = " ".join(parser.format_help().split())
    assert "--workers N CPU threads; 0 builds on the event loop (default 2)" in described
    assert "--prefetch N ring slots (default 8)" in described
    with pytest.raises(_UsageError, match=r"^argument --workers: must be >= 0 but got -1$"):
        parser.parse_args(["--workers", "-1"])


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
