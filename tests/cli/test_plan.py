"""aioloader.cli._plan: padding efficiency by strategy; no half-printed table on errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests._support.toml import tomllib
from tests.cli.helpers import Fail, Run

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def lengths(tmp_path: Path) -> Path:
    path = tmp_path / "lengths.txt"
    path.write_text("5, 23, 9, 31, 14, 7, 18, 4, 27, 11, 16, 8\n")
    return path


def test_reproduces_the_twelve_lengths_example(run: Run, lengths: Path, tmp_path: Path) -> None:
    out = run("plan", str(lengths), "--batch-size", "4", "--context-length", "32")
    assert out.splitlines() == [
        "12 sequences, 173 tokens, batch size 4",
        "| strategy | batches/epoch | rows | positions | real tokens |",
        "|---|---:|---:|---:|---:|",
        "| arrival | 3 | 12 | 304 | 56.9% |",
        "| bucketed | 3 | 12 | 220 | 78.6% |",
        "| packed (32) | 2 | 6 | 192 | 90.1% |",
    ]
    png = tmp_path / "plan.png"
    out = run("plan", str(lengths), "--batch-size", "4", "--plot", str(png))
    assert out.endswith(f"wrote {png}\n")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_into_a_missing_folder_fails_before_any_output(
    fail: Fail, lengths: Path, tmp_path: Path
) -> None:
    target = tmp_path / "nowhere" / "plan.png"
    assert fail("plan", str(lengths), "--batch-size", "4", "--plot", str(target)) == (
        f"error: --plot {target}: the folder {str(target.parent)!r} does not exist"
    )


def test_plot_without_matplotlib_names_the_plot_extra(
    fail: Fail, lengths: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    target = tmp_path / "plan.png"
    assert fail("plan", str(lengths), "--batch-size", "4", "--plot", str(target)) == (
        "error: --plot needs matplotlib (pip install 'aioloader[plot]')"
    )
    assert not target.exists()


def test_the_plot_extra_is_matplotlib_alone() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert [requirement.split(">")[0] for requirement in extras["plot"]] == ["matplotlib"]


def test_an_error_after_some_rows_prints_no_table(fail: Fail, tmp_path: Path) -> None:
    lengths = tmp_path / "negative.txt"
    lengths.write_text("5 -3 7")  # arrival and bucketing accept it; packing refuses it
    assert fail("plan", str(lengths), "--batch-size", "2") == (
        "error: lengths must be >= 0 but got -3"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [("5 x 7", "error: lengths must be integers but got 'x' in "), ("", "holds no lengths")],
)
def test_bad_lengths(fail: Fail, tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text)
    assert message in fail("plan", str(path), "--batch-size", "2")


def test_unreadable_file(fail: Fail) -> None:
    assert fail("plan", "/no/such/file", "--batch-size", "2") == (
        "error: cannot read /no/such/file: No such file or directory"
    )
