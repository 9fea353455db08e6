"""Time to the first batch, to the compiled kernels and to exit, with a cold and a warm cache.

Run: ``.venv/bin/python benchmarks/micro/first_batch.py [--repeat 3] [--workers 2]``.
docs/benchmarks.md (micro-benchmarks) says what it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = """
import json, sys, time
started = time.perf_counter()
import anyio
import aioloader
from aioloader.cli._demo import make_demo_loader
from aioloader.core import _backend
imported = time.perf_counter()

begin = 0.0

async def first() -> float:
    global begin
    loader = make_demo_loader(seed=0, workers=int(sys.argv[1]), prefetch=8)
    begin = time.perf_counter()
    async with loader.stream(0, 1) as stream:
        async for batch in stream:
            batch.release()
    return time.perf_counter() - begin

seconds = anyio.run(first)
ready = None
if sys.argv[2] == "ready":
    _backend.load()
    ready = time.perf_counter() - begin
print(json.dumps({"import": imported - started, "first_batch": seconds, "ready": ready,
                  "done": time.time()}), flush=True)
"""


def measure(cache: str, workers: int, kernels: str, wait_ready: bool) -> dict[str, float]:
    """One fresh interpreter: its figures, and ``exit`` (seconds after its last line)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, AIOLOADER_KERNELS=kernels)
    argv = [sys.executable, "-c", CHILD, str(workers), "ready" if wait_ready else "exit"]
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        line = child.stdout.readline()
        child.wait()
        ended = time.time()
    if child.returncode != 0 or not line:
        raise RuntimeError(f"the measured script failed with status {child.returncode}")
    figures = dict(json.loads(line))
    figures["exit"] = ended - figures.pop("done")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="cold/warm pairs (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    parser.add_argument("--kernels", choices=("auto", "numba"), default="auto")
    args = parser.parse_args()
    rows: dict[str, list[dict[str, float]]] = {"cold": [], "warm": []}
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="aioloader-numba-") as cache:
            cold = measure(os.path.join(cache, "a"), args.workers, args.kernels, False)
            filled = measure(os.path.join(cache, "b"), args.workers, args.kernels, True)
            rows["cold"].append({**cold, "ready": filled["ready"]})
            warm = measure(os.path.join(cache, "b"), args.workers, args.kernels, False)
            again = measure(os.path.join(cache, "b"), args.workers, args.kernels, True)
            rows["warm"].append({**warm, "ready": again["ready"]})
    print(
        f"kernels={args.kernels}, workers={args.workers}, {args.repeat} fresh interpreters "
        "each; seconds"
    )
    for kind, values in rows.items():
        for key in ("import", "first_batch", "ready", "exit"):
            column = [v[key] for v in values]
            print(
                f"  {kind:4} {key:12} median {statistics.median(column):.3f}  "
                f"max {max(column):.3f}  all {[round(c, 3) for c in column]}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
