"""aioloader.cli._digest: the fingerprint of a range of steps of a config."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.helpers import Fail, Run


def test_agrees_across_workers(run: Run, tmp_path: Path) -> None:
    config = tmp_path / "small.json"
    config.write_text(json.dumps({"count": 64, "batch_size": 8, "seed": 5}))
    one = run("digest", str(config), "--stop", "12", "--workers", "0")
    two = run("digest", str(config), "--stop", "12", "--workers", "2", "--prefetch", "2")
    assert one == two
    assert one.endswith("  steps 0..11\n")
    assert run("digest", str(config), "--start", "6", "--stop", "12") != one


def test_accepts_a_python_config(run: Run, tmp_path: Path) -> None:
    config = tmp_path / "cfg.py"
    config.write_text(
        "from aioloader import DataLoader, SequentialSampler\n"
        "from aioloader.testing import MemoryDataset, StackCollator\n"
        "def make_loader(*, workers, prefetch):\n"
        "    return DataLoader(MemoryDataset(list(range(10))), SequentialSampler(10, 2),\n"
        "                      StackCollator(), seed=0, workers=workers, prefetch=prefetch)\n"
    )
    first = run("digest", str(config), "--stop", "5")
    assert first == run("digest", str(config), "--stop", "5", "--workers", "1")


def test_empty_range(fail: Fail) -> None:
    assert fail("digest", "--start", "5", "--stop", "5") == (
        "error: --stop must be > --start (5) but got 5"
    )


def test_a_failing_sample_is_one_line_naming_the_step(fail: Fail, tmp_path: Path) -> None:
    config = tmp_path / "failing.py"
    config.write_text(
        "from aioloader import DataLoader, SequentialSampler\n"
        "from aioloader.testing import FailingDataset, MemoryDataset, StackCollator\n"
        "def make_loader(*, workers, prefetch):\n"
        "    data = FailingDataset(MemoryDataset(list(range(10))), {5})\n"
        "    return DataLoader(data, SequentialSampler(10, 2), StackCollator(), seed=0,\n"
        "                      workers=workers, prefetch=prefetch)\n"
    )
    line = fail("digest", str(config), "--stop", "5")
    assert line.startswith("error: injected failure reading index 5 (aioloader: ")
    assert "global step 2" in line
