"""Helpers of the command's tests: run ``main`` in-process and capture what it printed."""

from __future__ import annotations

import pytest

from aioloader.cli import main
from tests.cli.helpers import Fail, Run


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """``run(*argv)``: the standard output of a successful ``aioloader`` command."""

    def invoke(*argv: str) -> str:
        status = main(list(argv))
        captured = capsys.readouterr()
        assert status == 0, captured.err
        return captured.out

    return invoke


@pytest.fixture
def fail(capsys: pytest.CaptureFixture[str]) -> Fail:
    """``fail(*argv)``: the one error line of a failing command (exit status 2, no output)."""

    def invoke(*argv: str) -> str:
        try:
            status = main(list(argv))
        except SystemExit as exit_:
            status = exit_.code  # type: ignore[assignment]
        captured = capsys.readouterr()
        assert status == 2
        assert captured.out == ""
        lines = captured.err.splitlines()
        assert len(lines) == 1, captured.err
        assert lines[0].startswith("error: ")
        return lines[0]

    return invoke
