"""aioloader.cli._app: help lists every subcommand's arguments; errors are one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aioloader._compat import BaseExceptionGroup, add_note
from aioloader.cli import _app, build_parser, main
from tests.cli.helpers import Fail

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_what_each_subcommand_accepts() -> None:
    text = build_parser().format_help()
    for usage in (
        "aioloader demo [--workers N] [--prefetch N] [--steps N] [--start-step G] [--seed S]",
        "aioloader digest [--start START] [--stop STOP] [--workers N] [--prefetch N] [CONFIG]",
        "aioloader plan --batch-size B [--context-length L] [--pool-batches N] [--plot PNG]",
        "aioloader tune --step-ms MS [--load-ms MS] [--batches N] [--epoch-batches N] [--auto]",
        "aioloader bench [--quick] [--rounds N] [--workloads W1,W3,...] [--output DIR |",
    ):
        assert usage in text


def test_module_entry_point_prints_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "aioloader", "--help"], capture_output=True, text=True, check=True
    )
    assert result.stdout.startswith("usage: aioloader [-h] COMMAND ...")


def test_missing_command_is_one_line(fail: Fail) -> None:
    assert fail() == "error: the following arguments are required: COMMAND (see 'aioloader --help')"


def test_an_unexpected_error_is_one_line_with_its_type(
    fail: Fail, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr("aioloader.cli._digest.load_factory", broken)
    assert fail("digest") == "error: KeyError: 'boom'"
    monkeypatch.setenv(_app.DEBUG_VARIABLE, "1")
    with pytest.raises(KeyError, match="boom"):
        main(["digest"])


def test_describe_unwraps_groups_and_keeps_notes() -> None:
    error = ValueError("bad sample")
    add_note(error, "aioloader: while building global step 3")
    inner = BaseExceptionGroup("inner", [error, OSError("second")])
    group = BaseExceptionGroup("group", [inner])
    assert _app.describe(group) == (
        "bad sample (aioloader: while building global step 3) (and 1 more errors)"
    )


def test_a_traceback_never_reaches_the_terminal() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "aioloader", "plan", "/no/such/file", "--batch-size", "2"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "error: cannot read /no/such/file: No such file or directory\n"


def test_a_reader_that_stops_early_ends_the_command_quietly() -> None:
    read, write = os.pipe()
    os.close(read)  # as `| head -2` once it has its lines: every write now fails
    try:
        result = subprocess.run(
            [sys.executable, "-m", "aioloader", "tune", "--step-ms", "15", "--load-ms", "40"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT), AIOLOADER_KERNELS="numpy"),
            check=False,
        )
    finally:
        os.close(write)
    # before: a BrokenPipeError traceback, then another one at exit
    assert (result.returncode, result.stderr) == (1, "")
