"""aioloader.cli._arguments: the options several subcommands declare the same way."""

from __future__ import annotations

import argparse
from typing import NoReturn

import pytest

from aioloader.cli._arguments import add_loader_settings, add_option, positive


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
