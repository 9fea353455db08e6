"""benchmarks/run.py end to end at tiny sizes (``--quick``), and the ``bench`` subcommand."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from aioloader._cli import bench_script, build_parser

ROOT = Path(__file__).resolve().parents[1]


def test_bench_subcommand_finds_the_script_and_forwards_options() -> None:
    assert bench_script() == ROOT / "benchmarks" / "run.py"
    args = build_parser().parse_args(["bench", "--quick", "--rounds", "2", "--workloads", "W3"])
    assert (args.command, args.quick, args.rounds, args.workloads) == ("bench", True, 2, "W3")


@pytest.mark.skipif(sys.platform == "win32", reason="the benchmark ports assume POSIX")
def test_quick_run_writes_every_report(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--output", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
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
