"""Every example in examples/ runs to completion (they are the README's promises)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))
# Short forms of the examples whose full run takes long (tests/test_train_digits.py has more).
ARGUMENTS = {"train_digits.py": ["--epochs", "1", "--check-resume"]}


def test_examples_exist() -> None:
    assert [p.name for p in EXAMPLES] == [
        "distributed.py",
        "image_folder.py",
        "ingest_then_train.py",
        "object_store.py",
        "quickstart.py",
        "resume.py",
        "sequences.py",
        "streams.py",
        "sync_training.py",
        "tar_shards.py",
        "torch_trainer.py",
        "train_digits.py",
    ]


SLOW = {"train_digits.py", "torch_trainer.py", "ingest_then_train.py"}  # train, or ingest first


@pytest.mark.parametrize(
    "example",
    [
        pytest.param(path, marks=[pytest.mark.slow] if path.name in SLOW else [])
        for path in EXAMPLES
    ],
    ids=lambda p: p.stem,
)
def test_example_runs(example: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(example), *ARGUMENTS.get(example.name, [])],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard only
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip()
