"""``aioloader demo``'s steady state against the W1 benchmark's row (docs/benchmarks.md)."""

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = """
import sys
sys.path.insert(0, sys.argv[1])
from aioloader.kernels import _selection as _backend
from workloads import w1_images as w1
_backend.load()
cfg = w1.W1Config()
port = w1.Aioloader(cfg, w1.make_samples(cfg), workers=0, uvloop=True)
print(port.measure(cfg.warm, cfg.count))
"""
DEMO = ["-m", "aioloader", "demo", "--no-digest", "--workers", "0"]
BENCHMARKS = str(Path(__file__).resolve().parents[1])  # for workloads/ and systems/


def output(*argv: str) -> str:
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, check=True
    ).stdout


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    demo, bench = [], []
    for _ in range(parser.parse_args().rounds):
        out = output(*DEMO)
        steady = re.search(r"^steady state\s+([0-9,]+) batches/s", out, re.M)
        if steady is None:
            raise RuntimeError(f"no steady-state line in the demo's output:\n{out}")
        demo.append(float(steady.group(1).replace(",", "")))
        bench.append(float(output("-c", BENCH, BENCHMARKS).split()[-1]))
    ratio = statistics.median(demo) / statistics.median(bench)
    print(f"demo  steady state  median {statistics.median(demo):.0f}  all {demo}")
    rounded = [round(b) for b in bench]
    print(f"bench W1 w0 uvloop  median {statistics.median(bench):.0f}  all {rounded}")
    print(f"demo / bench {ratio:.2f} ({'within' if abs(ratio - 1) <= 0.15 else 'outside'} 15%)")
