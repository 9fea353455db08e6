"""``aioloader demo``'s steady state against ``aioloader bench``'s W1 row at the same setting.

Run: ``.venv/bin/python benchmarks/micro/demo_vs_bench.py [--rounds 5]``.
docs/benchmarks.md (micro-benchmarks) says what it measures.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = """
import sys
sys.path.insert(0, sys.argv[1])
from aioloader.core import _backend
from workloads import w1_images as w1
_backend.load()
cfg = w1.W1Config()
port = w1.Aioloader(cfg, w1.make_samples(cfg), workers=0, uvloop=True)
print(port.measure(cfg.warm, cfg.count))
"""

STEADY = re.compile(r"^steady state\s+([0-9,]+) batches/s", re.M)


def demo_rate() -> float:
    """One ``aioloader demo --no-digest``: its steady-state batches/s."""
    out = subprocess.run(
        [sys.executable, "-m", "aioloader", "demo", "--no-digest", "--workers", "0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = STEADY.search(out)
    if found is None:
        raise RuntimeError(f"no steady-state line in the demo's output:\n{out}")
    return float(found.group(1).replace(",", ""))


def bench_rate() -> float:
    """One measurement of the W1 benchmark's ``aioloader workers=0 uvloop`` row."""
    folder = str(Path(__file__).resolve().parents[1])  # benchmarks/: workloads, systems
    out = subprocess.run(
        [sys.executable, "-c", BENCH, folder], capture_output=True, text=True, check=True
    ).stdout
    return float(out.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    args = parser.parse_args()
    demo: list[float] = []
    bench: list[float] = []
    for _ in range(args.rounds):
        demo.append(demo_rate())
        bench.append(bench_rate())
    ratio = statistics.median(demo) / statistics.median(bench)
    print(f"demo  steady state  median {statistics.median(demo):.0f}  all {demo}")
    rounded = [round(b) for b in bench]
    print(f"bench W1 w0 uvloop  median {statistics.median(bench):.0f}  all {rounded}")
    print(f"demo / bench {ratio:.2f} ({'within' if abs(ratio - 1) <= 0.15 else 'outside'} 15%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
