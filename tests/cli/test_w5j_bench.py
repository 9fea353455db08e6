"""benchmarks/workloads/w5j_chain.py: W5J's rows give the same batches, and its targets."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("simplejpeg")

ROOT = Path(__file__).resolve().parents[2]
HAS_TORCH = importlib.util.find_spec("torch") is not None


def _benchmark_module(name: str) -> ModuleType:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module(name)


def test_quick_build_checks_every_row_against_the_plain_loop() -> None:
    w5j = _benchmark_module("workloads.w5j_chain")
    logged: list[str] = []
    cases, notes = w5j.build(True, logged.append, None, None)
    threads = [f"aioloader workers={w}" for w in (0, 1, 2, "auto")]
    torch_rows = ["torch DataLoader num_workers=0"] if HAS_TORCH else []
    assert [c.system for c in cases] == ["plain Python loop (1 thread)", *threads, *torch_rows]
    assert [c.baseline for c in cases] == [True] + [False] * (len(cases) - 1)
    assert {(c.workload, c.metric) for c in cases} == {("W5J", "images/s")}
    checked = [f"  W5J {name}: 2 batches bit-identical" for name in [*threads, *torch_rows]]
    assert logged[1:] == checked
    assert notes[-1].startswith("Quick run: W5Config(images=16, batch=8,")


@pytest.mark.slow  # starts worker processes
def test_process_and_torch_worker_rows_give_the_plain_loops_batches() -> None:
    harness = _benchmark_module("harness")
    w5j = _benchmark_module("workloads.w5j_chain")
    w5 = _benchmark_module("workloads.w5_jpeg")
    cfg = w5.W5Config(images=16, batch=8, processes=True)  # 500x375: crops really drawn
    jpegs = w5.make_jpegs(cfg.images, cfg.source_height, cfg.source_width, cfg.quality)
    rows = w5j.rows(cfg, [(data, i % 10) for i, data in enumerate(jpegs)], lambda _: None)
    names = [row.name for row in rows]
    assert names[-2:] == (
        ["aioloader processes=2", "torch DataLoader num_workers=2"]
        if HAS_TORCH
        else ["aioloader workers=auto", "aioloader processes=2"]
    )
    logged: list[str] = []
    harness.verify("W5J", rows, 2, w5j.arrays, logged.append)
    assert logged == [f"  W5J {name}: 2 batches bit-identical" for name in names[1:]]
    first = rows[0].step(0)
    assert {k: (v.dtype.str, v.shape) for k, v in first.items()} == {
        "images": ("|u1", (8, 224, 224, 3)),
        "labels": ("<i8", (8,)),
        "indices": ("<i8", (8,)),
    }
    assert first["images"].tobytes() != rows[0].step(1)["images"].tobytes()


def test_targets_compare_threads_with_one_thread_processes_and_auto() -> None:
    harness = _benchmark_module("harness")
    w5j = _benchmark_module("workloads.w5j_chain")
    medians = {"workers=0": 100.0, "workers=2": 190.0, "processes=2": 200.0, "workers=auto": 190.0}
    cases = []
    for name, value in medians.items():
        case = harness.Case("W5J", f"aioloader {name}", "images/s", lambda: 0.0)
        case.values = [value]
        cases.append(case)
    found = w5j.targets(cases)
    assert [(t["target"], t["ratio"], t["met"]) for t in found] == [
        ("W5J: threads workers=2 >= 1.8x workers=0", 1.9, True),
        ("W5J: threads workers=2 >= 0.9x processes=2", 0.95, True),
        (
            "W5J: aioloader workers=auto >= 0.95x the best hand-picked setting (same batches)",
            0.95,
            True,
        ),
    ]
    assert w5j.targets([]) == []
