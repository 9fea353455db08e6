"""The target of the torch form: torchvision's reference ImageFolder training script (its
shape, on the CPU) ports by changing the import of ``DataLoader`` only, and trains and
evaluates on the same number of samples every epoch."""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "from_torch"
TORCH = EXAMPLES / "reference_train_torch.py"
OURS = EXAMPLES / "reference_train_aioloader.py"


def test_the_port_changes_the_import_only() -> None:
    torch_lines = [line for line in TORCH.read_text().splitlines() if line.strip()]
    our_lines = [line for line in OURS.read_text().splitlines() if line.strip()]
    changes = [
        line
        for line in difflib.unified_diff(torch_lines, our_lines, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changes == [
        "-from torch.utils.data import DataLoader",
        "+from aioloader import DataLoader",
    ]


def epochs(script: Path, *arguments: str) -> list[tuple[int, int]]:
    result = subprocess.run(
        [sys.executable, str(script), "--epochs", "3", *arguments],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard only
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    found = re.findall(r"trained on (\d+) samples, evaluated (\d+)", result.stdout)
    return [(int(trained), int(evaluated)) for trained, evaluated in found]


@pytest.mark.parametrize("workers", ["0", "2"])
def test_both_scripts_see_the_same_samples_per_epoch(workers: str) -> None:
    expected = epochs(TORCH, "--workers", workers)
    assert expected == [(30, 9)] * 3
    assert epochs(OURS, "--workers", workers) == expected
