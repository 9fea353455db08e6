"""benchmarks/workloads/w9_*.py: W9 (accelerator feed), W9C and W9D run dry on the CPU, their
batch check really compares, and their targets."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("simplejpeg")
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str) -> ModuleType:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module(name)


def _args(tmp_path: Path) -> SimpleNamespace:
    return SimpleNamespace(w9_device="cpu", w9_folder=tmp_path / "jpegs")


def test_dry_run_checks_then_times_every_row_of_the_three_tables(tmp_path: Path) -> None:
    harness = _module("harness")
    logged: list[str] = []
    cases: list[Any] = []
    for name in ("w9_feed", "w9_cpu", "w9_demo"):
        found, _ = _module(f"workloads.{name}").build(True, logged.append, None, _args(tmp_path))
        cases += found
    assert [(c.workload, c.system, c.metric, c.baseline) for c in cases] == [
        ("W9", "synthetic batch on the device (upper bound)", "images/s", True),
        ("W9", "torch DataLoader num_workers=0", "images/s", False),
        ("W9", "aioloader threads=2, for", "images/s", False),
        ("W9", "aioloader threads=2, async for", "images/s", False),
        ("W9", "aioloader workers=auto, for", "images/s", False),
        ("W9C", "aioloader threads=0", "images/s", True),
        ("W9C", "aioloader threads=2", "images/s", False),
        ("W9C", "torch DataLoader num_workers=0", "images/s", False),
        ("W9D", "demo workers=0", "batches/s", True),
        ("W9D", "demo workers=1", "batches/s", False),
        ("W9D", "demo workers=2", "batches/s", False),
    ]
    checks = [line for line in logged if "bit-identical" in line]
    w9 = ["torch DataLoader num_workers=0", "aioloader threads=2, for"]
    w9 += ["aioloader threads=2, async for", "aioloader workers=auto, for"]
    w9c = ["aioloader threads=0", "aioloader threads=2", "torch DataLoader num_workers=0"]
    assert checks == (
        [f"  W9 {name}: 1 batches bit-identical" for name in w9]
        + [f"  W9C {name}: 1 batches bit-identical" for name in w9c]
        + [f"  W9D demo workers={w}: 2 batches bit-identical" for w in (1, 2)]
    )
    digests = {c.facts["digest"] for c in cases if c.workload in ("W9", "W9C")}
    assert len(digests) == 1  # W9 and W9C check the same batches
    assert {c.facts["device"] for c in cases if c.workload == "W9"} == {"cpu"}
    assert {c.facts["model"] for c in cases if c.workload == "W9"} == {"tiny"}
    harness.run_interleaved(cases, 1, logged.append)
    assert [c.system for c in cases if c.error] == []
    assert all(len(c.values) == 1 and c.values[0] > 0 for c in cases)


def _feed(w9: ModuleType, cfg: Any, items: list[tuple[str, int]], wrap: Any = None) -> Any:
    device = _module("systems.device")
    make = w9.loader_maker(cfg, items, 1)
    settings = {} if wrap is None else {"wrap": device.per_batch(wrap)}
    return device.loader_feed("aioloader threads=1, for", "", make, "for", **settings)


def test_the_check_catches_one_pixel_that_differs(tmp_path: Path) -> None:
    w9 = _module("workloads.w9_feed")
    cfg = w9.for_run(True, _args(tmp_path))
    items, _ = w9.data(cfg, lambda _: None)

    def one_pixel_off(batch: Any) -> Any:
        if batch.global_step == 1:
            batch.data["images"][3, 100, 7, 2] ^= 1
        return batch

    logged: list[str] = []
    good = w9.check("W9", [w9.reference(cfg, items), _feed(w9, cfg, items)], 2, logged.append)
    assert logged == ["  W9 aioloader threads=1, for: 2 batches bit-identical"]
    assert len(good) == 16
    bad = _feed(w9, cfg, items, one_pixel_off)
    with pytest.raises(AssertionError, match=r"^W9 aioloader threads=1, for: step 1 images "):
        w9.check("W9", [w9.reference(cfg, items), bad], 2, logged.append)
    first_step = w9.check("W9", [w9.reference(cfg, items), bad], 1, logged.append)
    assert first_step != good  # the digest covers the steps checked: step 0 alone is right


def test_the_chain_reads_files_and_each_row_gives_the_plain_loops_batches(
    tmp_path: Path,
) -> None:
    w9 = _module("workloads.w9_feed")
    cfg = w9.for_run(True, _args(tmp_path))
    items, kilobytes = w9.data(cfg, lambda _: None)
    assert [Path(path).name for path, _ in items[:2]] == ["00000.jpg", "00001.jpg"]
    assert [label for _, label in items[:12]] == [*range(10), 0, 1]
    assert kilobytes > 1
    with w9.reference(cfg, items).batches(2) as batches:
        first, second = batches
    assert {k: (v.dtype.str, v.shape) for k, v in first.items()} == {
        "images": ("|u1", (8, 224, 224, 3)),
        "labels": ("<i8", (8,)),
        "indices": ("<i8", (8,)),
    }
    indices = np.concatenate([first["indices"], second["indices"]]).tolist()
    assert len(set(indices)) == 16  # two steps of one epoch over 32 files
    assert first["images"].tobytes() != second["images"].tobytes()


def test_the_files_are_the_same_bytes_whoever_writes_them(tmp_path: Path) -> None:
    w9_data = _module("workloads.w9_data")
    files = w9_data.Files(256, 60, 80)
    spawned = w9_data.write_jpegs(tmp_path / "a", files, processes=2)
    inline = w9_data.write_jpegs(tmp_path / "b", files, processes=1)
    assert [p.name for p in spawned] == [f"{i:05d}.jpg" for i in range(256)]
    assert [p.read_bytes() for p in spawned] == [p.read_bytes() for p in inline]
    assert json.loads((tmp_path / "a" / w9_data.DONE).read_text()) == {
        "count": 256,
        "height": 60,
        "width": 80,
        "quality": 90,
    }
    (tmp_path / "a" / "00000.jpg").write_bytes(b"kept")  # a folder marked done is reused
    assert w9_data.write_jpegs(tmp_path / "a", files, processes=2) == spawned
    assert (tmp_path / "a" / "00000.jpg").read_bytes() == b"kept"


def _cases(harness: ModuleType, workload: str, medians: dict[str, float]) -> list[Any]:
    cases = []
    for name, value in medians.items():
        case = harness.Case(workload, name, "images/s", lambda: 0.0)
        case.values = [value]
        case.baseline = name.startswith(("synthetic", "aioloader threads=0", "demo workers=0"))
        case.group = name.split()[0] if not name.startswith("synthetic") else "upper bound"
        case.facts = {"device": "cuda"}
        cases.append(case)
    return cases


def test_targets_are_issue_34s_ratios() -> None:
    harness = _module("harness")
    medians = {
        "synthetic batch on the device (upper bound)": 4000.0,
        "torch DataLoader num_workers=15": 1900.0,
        "aioloader threads=15, for": 3800.0,
        "aioloader threads=15, async for": 3724.0,
        "aioloader processes=15, for": 3900.0,
        "aioloader processes=15, async for": 3705.0,
        "aioloader workers=auto, for": 3705.0,
    }
    found = _module("workloads.w9_feed").targets(_cases(harness, "W9", medians))
    assert [(t["target"], round(t["ratio"], 4), t["met"]) for t in found] == [
        ("W9: best aioloader row >= 0.95x synthetic", 0.975, True),
        ("W9: best aioloader row >= 2x torch's best", 2.0526, True),
        ("W9: threads >= 0.9x synthetic", 0.95, True),
        ("W9: threads, async for >= 0.97x for", 0.98, True),
        ("W9: processes, async for >= 0.97x for", 0.95, False),
        (
            "W9: aioloader workers=auto, for >= 0.95x the best hand-picked setting (same batches)",
            0.95,
            True,
        ),
    ]
    cores = _module("workloads.w9_feed").cores()
    most = f"aioloader threads={max(1, cores - 1)}"
    cpu = {"aioloader threads=0": 400.0, "aioloader threads=99": 9000.0, most: 4000.0}
    found = _module("workloads.w9_cpu").targets(_cases(harness, "W9C", cpu))
    assert [(t["target"], t["ratio"], t["met"]) for t in found] == [
        (f"W9C: {most} (cores - 1) >= 10x threads=0 (CPU only)", 10.0, True)
    ]
    demo = {"demo workers=0": 1000.0, "demo workers=8": 4900.0}
    found = _module("workloads.w9_demo").targets(_cases(harness, "W9D", demo))
    assert [(t["target"], t["ratio"], t["met"]) for t in found] == [
        ("W9D: demo workers=8 >= 5x workers=0", 4.9, False)
    ]
    for name in ("w9_feed", "w9_cpu", "w9_demo"):
        assert _module(f"workloads.{name}").targets([]) == []


def test_a_dry_run_target_says_so() -> None:
    harness = _module("harness")
    cases = _cases(harness, "W9", {"synthetic batch": 10.0, "aioloader threads=1, for": 5.0})
    for case in cases:
        case.facts = {"device": "cpu"}
    found = _module("workloads.w9_feed").targets(cases)
    assert found[0]["target"] == "W9: best aioloader row >= 0.95x synthetic (dry run, not a GPU)"
    assert all(t["target"].endswith("(dry run, not a GPU)") for t in found)


@pytest.mark.slow  # a benchmark smoke run in a child process, kernels loaded first
def test_run_py_writes_the_three_tables_under_one_name(tmp_path: Path) -> None:
    command = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--workloads"]
    command += ["W9,W9C,W9D", "--name", "w9", "--output", str(tmp_path), "--w9-device", "cpu"]
    command += ["--w9-folder", str(tmp_path / "jpegs")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    data = json.loads((tmp_path / "w9.json").read_text())
    assert [r["system"] for r in data["results"] if r["error"]] == []
    assert [r["workload"] for r in data["results"]].count("W9") == 5
    markdown = (tmp_path / "w9.md").read_text()
    for heading in ("## W9: accelerator feed", "## W9C: ", "## W9D: ", "## Targets"):
        assert heading in markdown
    assert "DRY RUN on cpu with the tiny model: no GPU figures" in markdown


def test_the_device_script_parses() -> None:
    script = ROOT / "benchmarks" / "device" / "w9.sh"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
