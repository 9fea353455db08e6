"""benchmarks/micro/before_after.py: the figures and the table from made-up values (exact),
the round order, the options, the batch check, and the child's pin to one tree's aioloader."""

from __future__ import annotations

import hashlib
import importlib
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str) -> ModuleType:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module(name)


def test_summary_gives_medians_spreads_the_ratio_of_medians_and_the_per_round_ratios() -> None:
    report = _module("micro._before_after_report")
    assert report.summary([100.0, 110.0, 90.0], [105.0, 99.0, 99.0]) == {
        "before": 100.0,
        "before_min": 90.0,
        "before_max": 110.0,
        "after": 99.0,
        "after_min": 99.0,
        "after_max": 105.0,
        "ratio": 0.99,
        "round_ratio_min": 0.9,  # round 2: 99 / 110
        "round_ratio_max": 1.1,  # round 3: 99 / 90
    }
    failed = report.summary([200.0, 300.0], [])
    assert failed["before"] == 250.0
    assert (failed["after"], failed["ratio"], failed["round_ratio_min"]) == (None, None, None)
    unpaired = report.summary([100.0, 120.0], [110.0])  # a round of "after" failed
    assert (unpaired["ratio"], unpaired["round_ratio_min"], unpaired["round_ratio_max"]) == (
        1.0,
        None,
        None,
    )
    assert report.geometric_mean([2.0, 0.5, 1.0]) == pytest.approx(1.0, abs=1e-15)
    assert report.geometric_mean([]) is None


def _row(workload: str, system: str, before: list[float], after: list[float]) -> dict[str, Any]:
    report = _module("micro._before_after_report")
    summary = report.summary(before, after)
    return {
        "workload": workload,
        "system": system,
        "metric": "batches/s",
        "errors": {},
        "summary": summary,
    }


def test_the_table_has_a_line_per_row_and_a_geometric_mean_per_workload() -> None:
    report = _module("micro._before_after_report")
    rows = [
        _row("W1", "aioloader workers=0 uvloop", [2000.0, 2100.0], [2200.0, 2100.0]),
        _row("W1", "aioloader workers=2 uvloop", [1000.0, 1000.0], [500.0, 500.0]),
        _row("W6", "+20 ms: aioloader TarShards", [210.0], []),
    ]
    rows[2]["errors"] = {"after": "RuntimeError: the aioloader child ended with code 1"}
    assert report.table(rows) == [
        "| workload | row | unit | before (median) | before min-max | after (median) "
        "| after min-max | after/before | per round min-max |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
        "| W1 | aioloader workers=0 uvloop | batches/s | 2,050.0 | 2,000.0-2,100.0 | 2,150.0 "
        "| 2,100.0-2,200.0 | 1.049x | 1.000-1.100 |",
        "| W1 | aioloader workers=2 uvloop | batches/s | 1,000.0 | 1,000.0-1,000.0 | 500.0 "
        "| 500.0-500.0 | 0.500x | 0.500-0.500 |",
        "| W6 | +20 ms: aioloader TarShards | batches/s | 210.0 | 210.0-210.0 | n/a | n/a-n/a "
        "| n/a | n/a-n/a |",
        "",
        "W6 +20 ms: aioloader TarShards: after FAILED: RuntimeError: the aioloader child ended "
        "with code 1.  ",
        "W1: after/before, geometric mean over 2 rows: 0.724x.  ",  # sqrt(2150/2050 * 0.5)
    ]


def test_the_document_names_the_command_both_revisions_and_the_machine() -> None:
    report = _module("micro._before_after_report")
    packages = {"aioloader": "0.1.0", "numpy": "2.4.6", "matplotlib": "3.11.2"}
    machine = {
        "date_utc": "2026-12-05 04:00",
        "cpu": "Some CPU",
        "cores": 2,
        "usable_cores": 2,
        "memory_gib": 23.5,
        "platform": "Linux",
        "python": "CPython 3.11.7",
        "packages": packages,
        "load_average_start": [0.5, 0.4, 0.3],
        "load_average_end": [1.0, 0.6, 0.4],
    }
    settings = {
        "command": "python benchmarks/run.py --micro before_after --workloads W1",
        "rounds": 5,
        "workloads": ["W1"],
        "seconds": 61.4,
        "kernels": "before numba, after numba",
        "before": {"revision": "c550951", "commit": "c" * 40, "subject": "x" * 120},
        "after": {"commit": "d" * 40, "changes": " (aioloader/ committed)"},
    }
    data = {"machine": machine, "settings": settings, "checked": "W1", "rows": []}
    lines = report.markdown(data).splitlines()
    assert lines[:8] == [
        "# aioloader before and after: the aioloader rows of W1",
        "",
        "Command: `python benchmarks/run.py --micro before_after --workloads W1`  ",
        f"Before: c550951 ({'c' * 40}): {'x' * 97}...  ",
        f"After: the working tree at {'d' * 40} (aioloader/ committed).  ",
        "Date (UTC): 2026-12-05 04:00; rounds: 5, the two revisions alternating which runs "
        "first; each in a fresh process per round (W6: per row); the run took 61 s; kernels: "
        "before numba, after numba.  ",
        "Machine: Some CPU, 2 cores (2 usable), 23.5 GiB, Linux; CPython 3.11.7 with aioloader "
        "0.1.0, numpy 2.4.6; load average (1, 5, 15 min) [0.5, 0.4, 0.3] at the start and "
        "[1.0, 0.6, 0.4] at the end.",
        "",
    ]
    assert "each row's batches gave the same digest on both (W1)" in lines[8]


def test_rounds_alternate_which_revision_runs_first() -> None:
    before_after = _module("micro.before_after")
    assert [before_after.order(i) for i in range(4)] == [
        ("before", "after"),
        ("after", "before"),
        ("before", "after"),
        ("after", "before"),
    ]


def test_options_defaults_quick_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    before_after = _module("micro.before_after")
    args = before_after.parse_args([])
    assert (args.before, args.rounds, args.quick, args.workloads) == (
        "c550951",
        5,
        False,
        ["W1", "W1U", "W6"],
    )
    assert args.commit.startswith("c550951")
    assert len(args.commit) == 40
    assert args.output == ROOT / "benchmarks" / "results"
    assert before_after.parse_args(["--quick"]).rounds == 1
    assert before_after.parse_args(["--quick", "--rounds", "3"]).rounds == 3
    assert before_after.parse_args(["--workloads", "w6,w1"]).workloads == ["W1", "W6"]
    for bad, said in (
        (["--workloads", "W1,W7"], "--workloads must name some of W1,W1U,W6 but got 'W1,W7'"),
        (["--rounds", "0"], "--rounds must be >= 1 but got 0"),
        (["--before", "no-such-rev"], "--before must name a commit of this repository but got"),
    ):
        with pytest.raises(SystemExit):
            before_after.parse_args(bad)
        assert said in capsys.readouterr().err


class _Steps:
    """A port whose step ``g`` is ``{"x": arange(3) + g}`` (``shift`` added from step 2)."""

    group = "aioloader"
    exact = True

    def __init__(self, name: str, shift: int = 0) -> None:
        self.name, self.shift = name, shift

    def batches(self, stop: int) -> Any:
        import contextlib

        batches = ({"x": np.arange(3) + g + (self.shift if g >= 2 else 0)} for g in range(stop))
        return contextlib.nullcontext(batches)

    def release(self, batch: Any) -> None:
        pass


def test_the_check_digests_the_batches_every_row_agrees_on() -> None:
    child = _module("micro._before_after_child")
    logged: list[str] = []
    ports = [_Steps("a"), _Steps("b")]
    got = child.digest_rows("W1", ports, 3, lambda batch: batch, logged.append)
    sha = hashlib.sha256()
    for g in range(3):
        x = np.arange(3) + g
        sha.update(f"x {x.dtype} (3,)".encode())
        sha.update(x.tobytes())
    assert got == sha.hexdigest()
    assert logged == ["  W1 b: 3 batches bit-identical"]  # checked against a's
    with pytest.raises(AssertionError, match="W1 c: step 2 x differs"):
        child.digest_rows("W1", [_Steps("a"), _Steps("c", shift=1)], 3, lambda b: b, print)


def _python(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_child_imports_the_aioloader_of_its_tree_or_stops(tmp_path: Path) -> None:
    before_after = _module("micro.before_after")
    tree = tmp_path / "tree"
    (tree / "aioloader").mkdir(parents=True)
    (tree / "aioloader" / "__init__.py").write_text("WHO = 'the tree'\n")
    env = before_after.child_env(tree, tmp_path / "shim")
    # the repository's root first on sys.path (as W6's row script puts it) changes nothing
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import aioloader; print(aioloader.WHO)"
    done = _python(env, code)
    assert (done.returncode, done.stdout) == (0, "the tree\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    done = _python(before_after.child_env(empty, tmp_path / "shim-empty"), "print('ran')")
    assert (done.returncode, done.stdout) == (3, "")
    assert f"before_after: aioloader is not the one of {str(empty)!r}" in done.stderr
