"""Time to the first batch of the spec workload with a cold and a warm kernel cache.

Run: ``.venv/bin/python benchmarks/first_batch.py [--repeat 3] [--workers 2]``.

Each measurement is a fresh interpreter: ``import aioloader`` is timed apart, then the
first batch of ``aioloader demo``'s loader (2,048 line images, batch 128, GainOffset) from
the moment the loader is made, then (``ready``) the time from that moment until the compiled
kernels are loaded. "cold" points ``NUMBA_CACHE_DIR`` at a new empty folder (as on a
machine that never ran aioloader); "warm" runs again with the folder that cold filled.
``--kernels auto`` (the default: numpy builds batches until the kernels are loaded in the
background) or ``numba`` (the first batch waits for them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import json, sys, time
started = time.perf_counter()
import anyio
import aioloader
from aioloader._demo import make_demo_loader
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
from aioloader.core import _backend
_backend.load()
ready = time.perf_counter() - begin
print(json.dumps({"import": imported - started, "first_batch": seconds, "ready": ready}))
"""


def measure(cache: str, workers: int, kernels: str) -> dict[str, float]:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, AIOLOADER_KERNELS=kernels)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(workers)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="cold/warm pairs (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    parser.add_argument("--kernels", choices=("auto", "numba"), default="auto")
    args = parser.parse_args()
    rows: dict[str, list[dict[str, float]]] = {"cold": [], "warm": []}
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="aioloader-numba-") as cache:
            rows["cold"].append(measure(cache, args.workers, args.kernels))
            rows["warm"].append(measure(cache, args.workers, args.kernels))
    print(
        f"kernels={args.kernels}, workers={args.workers}, {args.repeat} fresh interpreters "
        "each; seconds"
    )
    for kind, values in rows.items():
        for key in ("import", "first_batch", "ready"):
            column = [v[key] for v in values]
            print(
                f"  {kind:4} {key:12} median {statistics.median(column):.3f}  "
                f"max {max(column):.3f}  all {[round(c, 3) for c in column]}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
