"""Micro-benchmarks: small scripts that time one mechanism each.

Run one with ``python benchmarks/run.py --micro NAME [its options]`` (``--micro NAME --help``
lists them), or alone with ``python -m benchmarks.micro.NAME`` from the repository root.
To add one: write its module and add its name to ``MODULES``; docs/benchmarks.md says what
each measures.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MODULES = (
    "before_after",
    "bench_cache",
    "bench_collate",
    "bench_core",
    "bench_engine",
    "bench_object_store",
    "bench_overhead",
    "bench_planner",
    "bench_tar_batch",
    "bench_tar_index",
    "bench_transfer",
    "demo_vs_bench",
    "engine_calls",
    "first_batch",
    "gil_split",
    "held_loop",
    "ingest_memory",
    "jpeg_chain",
    "kept_tensors",
    "leave_and_return",
    "soak_ingest",
    "transform_rng",
    "trickle_ingest",
    "w6_ceiling",
    "weighted_sampler",
)


def run(argv: Sequence[str]) -> int:
    """Run micro-benchmark ``argv[0]`` with options ``argv[1:]`` in a fresh interpreter.

    It runs as ``python -m benchmarks.micro.NAME`` from the repository root, with the root and
    benchmarks/ (the workloads, the storage rig) on ``PYTHONPATH``; returns its exit status.
    """
    name, *options = argv
    if name not in MODULES:
        raise ValueError(f"micro-benchmark must be one of {', '.join(MODULES)} but got {name!r}")
    paths = [str(ROOT), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    command = [sys.executable, "-m", f"benchmarks.micro.{name}", *options]
    return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
