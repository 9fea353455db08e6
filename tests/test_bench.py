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


def _benchmark_module(name: str):  # type: ignore[no-untyped-def]
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module(name)


def test_w6_data_is_seeded_jpegs_of_40_to_100_kb(tmp_path: Path) -> None:
    pytest.importorskip("PIL")
    w6_data = _benchmark_module("w6_data")
    folder = w6_data.generate(tmp_path, 3, seed=5)
    sizes = [len(w6_data.read_jpeg(folder, i)) for i in range(3)]
    assert all(40_000 <= size <= 100_000 for size in sizes), sizes
    assert w6_data.read_jpeg(folder, 1) == w6_data.make_jpeg(1, 5)  # a function of (seed, i)
    assert w6_data.make_jpeg(1, 6) != w6_data.make_jpeg(1, 5)
    assert w6_data.dataset_bytes(folder) == sum(sizes)
    tensor = w6_data.preprocess(w6_data.read_jpeg(folder, 0))
    assert (tensor.shape, tensor.dtype.name, tensor.flags.c_contiguous) == (
        (3, 224, 224),
        "float32",
        True,
    )
    batch = w6_data.collate([tensor, tensor], [w6_data.label_of(0), w6_data.label_of(3)], [0, 3])
    assert batch["image"].shape == (2, 3, 224, 224)
    assert batch["label"].tolist() == [0, 3 * 7919 % 1000]


def test_w6_exactly_once_names_what_went_wrong() -> None:
    w6_data = _benchmark_module("w6_data")
    assert w6_data.exactly_once([2, 0, 3, 1], 4) == "yes"
    assert w6_data.exactly_once([0, 1, 1, 3], 4) == "NO: 1 missing, 1 repeated, 0 unknown"
    assert w6_data.exactly_once([0, 1, 2, 3, 9], 4) == "NO: 0 missing, 0 repeated, 1 unknown"


def test_w6_is_named_only_and_its_tar_shards_hold_every_sample_once(tmp_path: Path) -> None:
    pytest.importorskip("webdataset")
    run = _benchmark_module("run")
    assert "W6" in run.WORKLOADS
    assert "W6" not in run.parse_args([]).workloads  # minutes and peers: only when named
    w6_data = _benchmark_module("w6_data")
    folder = w6_data.generate(tmp_path, 3, seed=5)
    shards = w6_data.write_webdataset(folder, 3, tmp_path / "wds")
    from aioloader import TarShards

    source = TarShards(shards)
    ids = [int(_read(source, i)["id"]) for i in range(len(source))]
    assert w6_data.exactly_once(ids, 3) == "yes"
    assert _read(source, 2)["jpg"] == w6_data.read_jpeg(folder, 2)
    assert int(_read(source, 2)["cls"]) == w6_data.label_of(2)


def _read(source, index: int):  # type: ignore[no-untyped-def]
    import anyio

    return anyio.run(source.get_sample, index)
