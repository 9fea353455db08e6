"""aioloader.cli._bench, and benchmarks/run.py end to end at tiny sizes (``--quick``)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from aioloader.cli import build_parser
from aioloader.cli._bench import bench_script
from tests.cli.helpers import Fail

ROOT = Path(__file__).resolve().parents[2]


def test_bench_subcommand_finds_the_script_and_forwards_options() -> None:
    assert bench_script() == ROOT / "benchmarks" / "run.py"
    args = build_parser().parse_args(["bench", "--quick", "--rounds", "2", "--workloads", "W3"])
    assert (args.command, args.quick, args.rounds, args.workloads) == ("bench", True, 2, "W3")


@pytest.mark.slow  # a benchmark smoke run
@pytest.mark.skipif(sys.platform == "win32", reason="the benchmark ports assume POSIX")
def test_quick_run_writes_every_report(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--output", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard only
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    data = json.loads((tmp_path / "results.json").read_text())
    rows = data["results"]
    assert {r["workload"] for r in rows} >= {"W1", "W3", "W4"}  # W2 needs weed and aiohttp
    assert [r["system"] for r in rows if r["error"]] == []
    assert all(r["median"] is not None for r in rows)
    has_torch = importlib.util.find_spec("torch") is not None
    with_baseline = {r["workload"] for r in rows if r["baseline"]}
    assert with_baseline == {r["workload"] for r in rows} - (set() if has_torch else {"W4"})
    assert data["machine"]["cores"] >= 1
    assert data["settings"]["quick"] is True
    markdown = (tmp_path / "results.md").read_text()
    for heading in ("## W1", "## W3", "## W4", "## Targets"):
        assert heading in markdown
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_results_go_to_a_new_folder_unless_updating(tmp_path: Path) -> None:
    from aioloader.cli._bench import RESULTS_ROOT, output_folder

    parser = build_parser()
    fresh = output_folder(parser.parse_args(["bench"]), bench_script())
    assert fresh.parent == RESULTS_ROOT
    assert len(fresh.name) == len("20260101-120000")
    tracked = output_folder(parser.parse_args(["bench", "--update-results"]), bench_script())
    assert tracked == ROOT / "benchmarks" / "results"
    chosen = output_folder(parser.parse_args(["bench", "--output", str(tmp_path / "new")]), ROOT)
    assert chosen == tmp_path / "new"


def test_an_existing_output_folder_is_refused(fail: Fail, tmp_path: Path) -> None:
    assert fail("bench", "--quick", "--output", str(tmp_path)) == (
        f"error: --output {str(tmp_path)!r} already exists; name a new folder, or pass "
        "--update-results to overwrite the tracked results"
    )


def test_output_and_update_results_exclude_each_other(fail: Fail, tmp_path: Path) -> None:
    line = fail("bench", "--output", str(tmp_path / "x"), "--update-results")
    assert "argument --update-results: not allowed with argument --output" in line


def test_unknown_workload(fail: Fail) -> None:
    assert fail("bench", "--workloads", "W1,W99").startswith(
        "error: --workloads must name some of W1, "
    )


@pytest.mark.slow  # a benchmark smoke run
def test_bench_subcommand_writes_a_new_folder(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "aioloader", "bench", "--quick", "--workloads", "W4"],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard only
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (folder,) = (tmp_path / "bench-results").iterdir()
    assert done.stdout.endswith(f"results in {Path('bench-results') / folder.name}\n")
    assert json.loads((folder / "w4.json").read_text())["settings"]["workloads"] == ["W4"]
