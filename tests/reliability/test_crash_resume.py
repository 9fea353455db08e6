"""Crash and resume: a loop killed with SIGKILL resumes from its checkpoint bit for bit."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("crash_child.py")
STOP = 40
EVERY = 5


def _start(tmp: Path, workers: int, name: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(CHILD),
            str(tmp / f"{name}.state"),
            str(tmp / f"{name}.digests"),
            str(STOP),
            str(workers),
            str(EVERY),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _digests(path: Path) -> dict[int, str]:
    result: dict[int, str] = {}
    for line in path.read_text().splitlines():
        step, digest = line.split()
        assert result.setdefault(int(step), digest) == digest  # a replayed step is identical
    return result


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    tmp = tmp_path_factory.mktemp("reference")
    child = _start(tmp, 0, "ref")
    child.communicate(timeout=120)
    assert child.returncode == 0
    digests = _digests(tmp / "ref.digests")
    assert sorted(digests) == list(range(STOP))
    return digests


@pytest.mark.slow  # killed and resumed processes
@pytest.mark.parametrize(("workers", "kill_seed"), [(0, 1), (1, 2), (2, 3), (2, 4)])
def test_killed_run_resumes_identically(
    tmp_path: Path, reference: dict[int, str], workers: int, kill_seed: int
) -> None:
    kill_at = random.Random(kill_seed).randrange(EVERY + 1, STOP - 2)
    child = _start(tmp_path, workers, "run")
    assert child.stdout is not None
    for line in child.stdout:  # wait (by reading its output, not by sleeping) for the step
        if int(line) >= kill_at:
            child.send_signal(signal.SIGKILL)
            break
    child.stdout.close()
    assert child.wait(timeout=60) == -signal.SIGKILL
    saved = json.loads((tmp_path / "run.state").read_text())
    assert saved["seed"] == 99
    assert saved["next_step"] % EVERY == 0
    assert EVERY <= saved["next_step"] < STOP  # killed mid-run, after a checkpoint
    resumed = _start(tmp_path, 3 - workers, "run")  # another worker count on restart
    resumed.communicate(timeout=120)
    assert resumed.returncode == 0
    assert _digests(tmp_path / "run.digests") == reference
