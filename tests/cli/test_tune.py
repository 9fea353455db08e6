"""aioloader.cli._tune: the epoch length comes from the config; the output is bounded."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from aioloader.cli import _tune
from aioloader.cli._tune import MAX_ROWS, describe_autotune, worker_counts
from aioloader.core._autotune import Decision, Knobs
from aioloader.kernels import _selection as _backend
from aioloader.kernels._cache import FILLED
from tests._support.kernels import WITHHELD, BlockingLoad, slow_kernels
from tests.cli.helpers import Fail, Run


def test_reproduces_the_workers_example(run: Run) -> None:
    out = run("tune", "--step-ms", "15", "--load-ms", "40", "--epoch-batches", "12")
    lines = out.splitlines()
    assert lines[0] == "recommended: workers=3, prefetch=6"
    assert "idealised epoch of 12 batches (--epoch-batches; load 40.0 ms, step 15 ms):" in lines
    assert lines[-5:] == [
        "  workers=0: 660 ms",
        "  workers=1: 495 ms",
        "  workers=2: 270 ms",
        "  workers=3: 220 ms",
        "  workers=4: 220 ms",
    ]


def test_epoch_length_comes_from_the_config(run: Run, tmp_path: Path) -> None:
    demo = run("tune", "--step-ms", "15", "--load-ms", "40")
    assert "idealised epoch of 16 batches (the config; load 40.0 ms, step 15 ms):" in demo
    assert "  workers=0: 880 ms" in demo
    config = tmp_path / "small.json"
    config.write_text(json.dumps({"count": 64, "batch_size": 8}))
    small = run("tune", str(config), "--step-ms", "15", "--load-ms", "40")
    assert "idealised epoch of 8 batches (the config;" in small


def test_measures_when_no_load_is_given(run: Run, tmp_path: Path) -> None:
    config = tmp_path / "small.json"
    config.write_text(json.dumps({"count": 64, "batch_size": 8}))
    lines = run("tune", str(config), "--step-ms", "1000", "--batches", "4").splitlines()
    assert lines[0].startswith("measured load time per batch: ")
    assert " ms over 4 batches after 2 warm-up batches; kernels " in lines[0]
    assert lines[1] == "recommended: workers=1, prefetch=2"


def test_the_kernels_load_before_the_clock_starts(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]  # a fake clock: only the kernels' load moves it, by 1 s

    def advance() -> None:
        now[0] += 1.0

    monkeypatch.setattr(_tune, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    slow_kernels(monkeypatch, BlockingLoad(advance, blocks=False), FILLED)
    config = tmp_path / "small.json"
    config.write_text(json.dumps({"count": 64, "batch_size": 8}))
    with _backend.use_kernels("auto"):
        lines = run("tune", str(config), "--step-ms", "1", "--batches", "4").splitlines()
    # before: "measured load time per batch: 250.00 ms over 4 batches" (the load counted)
    assert lines[0] == (
        "measured load time per batch: 0.00 ms over 4 batches after 2 warm-up batches; "
        f"kernels numpy (the compiled kernels could not load: {WITHHELD})"
    )
    assert lines[1] == "recommended: workers=1, prefetch=2"


def test_output_is_bounded_for_any_recommendation(run: Run) -> None:
    lines = run("tune", "--step-ms", "0.001", "--load-ms", "4000").splitlines()
    assert lines[0] == "recommended: workers=4000000, prefetch=8000000"
    rows = [line for line in lines if line.startswith("  workers=")]
    assert len(rows) == MAX_ROWS
    assert rows[0] == "  workers=0: 1.1 min"
    assert rows[-1] == "  workers=4000001: 4.0 s"


def test_worker_counts() -> None:
    assert worker_counts(1) == [0, 1, 2]
    assert worker_counts(6) == [0, 1, 2, 3, 4, 5, 6, 7]
    assert worker_counts(7) == [0, 1, 2, 3, 6, 7, 8]
    assert all(len(worker_counts(w)) <= MAX_ROWS for w in range(1, 200))


def test_bad_step(fail: Fail) -> None:
    assert fail("tune", "--step-ms", "0", "--load-ms", "1").startswith(
        "error: argument --step-ms: must be a finite number > 0 but got 0"
    )
    assert fail("tune", "--step-ms", "nan").startswith(
        "error: argument --step-ms: must be a finite number > 0 but got nan"
    )


def test_describe_autotune_lists_each_decision() -> None:
    decisions = (
        Decision(8, "workers", 1, 2, "consumer waited 40% of the window; build 2s >= read 1s"),
        Decision(16, "prefetch", 2, 4, "consumer waited 9% of the window; read 3s > build 1s"),
    )
    lines = describe_autotune(Knobs(1, 2, 64), Knobs(2, 4, 64), decisions)
    assert lines == [
        "auto chose: workers=2, prefetch=4, reads in flight=64",
        "started at workers=1, prefetch=2, reads in flight=64; decisions:",
        "  step 8: workers 1 -> 2 (consumer waited 40% of the window; build 2s >= read 1s)",
        "  step 16: prefetch 2 -> 4 (consumer waited 9% of the window; read 3s > build 1s)",
    ]


def test_auto_runs_the_config_and_reports_its_choice(run: Run, tmp_path: Path) -> None:
    config = tmp_path / "small.json"
    config.write_text(json.dumps({"count": 64, "batch_size": 8}))
    lines = run("tune", str(config), "--auto", "--step-ms", "1", "--batches", "16").splitlines()
    assert lines[0].startswith("ran 16 batches autotuned against a 1 ms step; consumer waited ")
    assert lines[1].startswith("auto chose: workers=")
    threads = min(8, os.cpu_count() or 1)  # auto starts at the most threads, 2 steps each
    start = f"workers={threads}, prefetch={max(2, 2 * threads)}, reads in flight=64"
    if lines[2].startswith("no change"):
        assert lines[1] == f"auto chose: {start}"
        assert len(lines) == 3
    else:
        assert lines[2] == f"started at {start}; decisions:"
        assert lines[3:]
        assert all(line.startswith("  step ") for line in lines[3:])


def test_auto_takes_no_load_ms(fail: Fail) -> None:
    message = fail("tune", "--auto", "--step-ms", "1", "--load-ms", "5")
    assert "--auto measures a real run, so it takes no --load-ms" in message
