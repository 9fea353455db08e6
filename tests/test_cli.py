"""aioloader._cli: every subcommand, in-process, and the module entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aioloader._cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def digest_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("digest"))


def test_demo_digest_is_the_same_for_any_workers_and_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    resumed = run(capsys, "demo", "--steps", "6", "--start-step", "4", "--workers", "0")
    threaded = run(
        capsys, "demo", "--steps", "6", "--start-step", "4", "--workers", "2", "--prefetch", "3"
    )
    trio = run(capsys, "demo", "--steps", "6", "--start-step", "4", "--backend", "trio")
    assert digest_line(resumed) == digest_line(threaded) == digest_line(trio)
    assert "steps 4..9  workers 0  prefetch 8" in resumed
    assert "batches/s" in resumed
    assert "consumer wait" in resumed


def test_digest_agrees_across_workers(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "small.json"
    config.write_text(json.dumps({"count": 64, "batch_size": 8, "seed": 5}))
    one = run(capsys, "digest", str(config), "--stop", "12", "--workers", "0")
    two = run(capsys, "digest", str(config), "--stop", "12", "--workers", "2", "--prefetch", "2")
    assert one == two
    assert one.endswith("  steps 0..11\n")
    tail = run(capsys, "digest", str(config), "--start", "6", "--stop", "12")
    assert tail != one


def test_digest_accepts_a_python_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "cfg.py"
    config.write_text(
        "from aioloader import DataLoader, SequentialSampler\n"
        "from aioloader.testing import MemoryDataset, StackCollator\n"
        "def make_loader(*, workers, prefetch):\n"
        "    return DataLoader(MemoryDataset(list(range(10))), SequentialSampler(10, 2),\n"
        "                      StackCollator(), seed=0, workers=workers, prefetch=prefetch)\n"
    )
    assert run(capsys, "digest", str(config), "--stop", "5") == run(
        capsys, "digest", str(config), "--stop", "5", "--workers", "1"
    )


def test_plan_reproduces_the_background_example(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("5, 23, 9, 31, 14, 7, 18, 4, 27, 11, 16, 8\n")
    out = run(capsys, "plan", str(lengths), "--batch-size", "4", "--context-length", "32")
    assert "| arrival | 3 | 12 | 304 | 56.9% |" in out
    assert "| packed (32) | 2 | 6 | 192 | 90.1% |" in out
    png = tmp_path / "plan.png"
    run(capsys, "plan", str(lengths), "--batch-size", "4", "--plot", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tune_reproduces_the_workers_example(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "tune", "--step-ms", "15", "--load-ms", "40")
    assert "recommended: workers=3, prefetch=6" in out
    assert "  workers=0: 660 ms" in out
    assert "  workers=3: 220 ms" in out


def test_tune_measures_when_no_load_is_given(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "small.json"
    config.write_text(json.dumps({"count": 64, "batch_size": 8}))
    out = run(capsys, "tune", str(config), "--step-ms", "1000", "--batches", "4")
    assert "measured load time per batch" in out
    assert "recommended: workers=1, prefetch=2" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--workers", "-1"], "argument --workers: must be >= 0 but got -1"),
        (["demo", "--steps", "x"], "argument --steps: must be an integer but got 'x'"),
        (["digest", "--start", "5", "--stop", "5"], "--stop must be > --start (5) but got 5"),
        (["plan", "/no/such/file", "--batch-size", "2"], "cannot read /no/such/file"),
        (["tune", "--step-ms", "0", "--load-ms", "1"], "--step-ms must be > 0 but got 0.0"),
    ],
)
def test_bad_arguments_give_clear_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert message in capsys.readouterr().err + str(info.value.code)


def test_bad_config_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"batch": 3}))
    with pytest.raises(SystemExit) as info:
        main(["digest", str(config)])
    assert info.value.code == 2
    assert "aioloader digest: error: config keys must be among" in capsys.readouterr().err


def test_module_entry_point_prints_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "aioloader", "--help"], capture_output=True, text=True, check=True
    )
    for command in ("demo", "digest", "plan", "tune"):
        assert command in result.stdout
