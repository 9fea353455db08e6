"""aioloader.cli._demo: the line-image workload, with and without the per-batch hash."""

from __future__ import annotations

import importlib.util

import pytest

from aioloader.cli import build_parser
from tests.cli.helpers import Fail, Run


def digest_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("digest"))


def test_digest_is_the_same_for_any_workers_backend_and_start(run: Run) -> None:
    resumed = run("demo", "--steps", "6", "--start-step", "4", "--backend", "asyncio")
    threaded = run("demo", "--steps", "6", "--start-step", "4", "--workers", "2", "--prefetch", "3")
    trio = run("demo", "--steps", "6", "--start-step", "4", "--backend", "trio")
    assert digest_line(resumed) == digest_line(threaded) == digest_line(trio)
    assert resumed.splitlines()[0] == "steps 4..9  workers 0  prefetch 8  backend asyncio"


def test_prints_both_passes(run: Run) -> None:
    lines = run("demo", "--steps", "3").splitlines()
    assert [line.split()[0] for line in lines] == ["steps", "loader", "with", "digest"]
    assert lines[1].startswith("loader alone ")
    assert "batches/s  (consumer waited " in lines[1]
    assert lines[2].endswith("batches/s  (SHA-256 of every batch on the consumer's thread)")
    assert len(lines[3].split()[1]) == 64


def test_no_digest_runs_the_loader_alone(run: Run) -> None:
    lines = run("demo", "--steps", "2", "--no-digest").splitlines()
    assert len(lines) == 2
    assert lines[1].startswith("loader alone ")


def test_defaults_are_the_readme_setting() -> None:
    args = build_parser().parse_args(["demo"])
    expected = ("uvloop", 0, 8, 500)  # uvloop is installed wherever the tests run
    assert (args.backend, args.workers, args.prefetch, args.steps) == expected


def test_missing_event_loop_package_is_one_line(
    fail: Fail, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec

    def without_trio(name: str, *args: object) -> object:
        return None if name == "trio" else real(name)

    monkeypatch.setattr(importlib.util, "find_spec", without_trio)
    assert fail("demo", "--steps", "1", "--backend", "trio") == (
        "error: --backend trio needs the trio package, which is not installed (pip install trio)"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "-1"], "argument --workers: must be >= 0 but got -1"),
        (["--steps", "x"], "argument --steps: must be an integer but got 'x'"),
        (["--backend", "gevent"], "argument --backend: invalid choice: 'gevent'"),
    ],
)
def test_bad_arguments(fail: Fail, argv: list[str], message: str) -> None:
    line = fail("demo", *argv)
    assert line.startswith(f"error: {message}")
    assert line.endswith("(see 'aioloader demo --help')")


@pytest.mark.parametrize("steps", ["-5", "0"])
def test_steps_below_one_get_one_message(fail: Fail, steps: str) -> None:
    assert fail("demo", "--steps", steps) == (
        f"error: argument --steps: must be >= 1 but got {steps} (see 'aioloader demo --help')"
    )
