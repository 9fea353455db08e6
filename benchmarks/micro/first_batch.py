"""Time to the first batch, to the kernels and to exit, cold and warm (docs/benchmarks.md)."""

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
import anyio, aioloader
from aioloader.cli._demo import make_demo_loader
from aioloader.kernels import _selection as _backend
imported = time.perf_counter()

async def first():
    loader = make_demo_loader(seed=0, workers=int(sys.argv[1]), prefetch=8)
    begin = time.perf_counter()
    async with loader.stream(0, 1) as stream:
        async for batch in stream:
            batch.release()
    return begin, time.perf_counter() - begin

begin, seconds = anyio.run(first)
ready = None
if sys.argv[2] == "ready":
    _backend.load()
    ready = time.perf_counter() - begin
print(json.dumps({"import": imported - started, "first_batch": seconds, "ready": ready,
                  "done": time.time()}), flush=True)
"""


def measure(cache: str, args: argparse.Namespace, then: str) -> dict[str, float]:
    """One fresh interpreter's figures, and ``exit``: seconds from its last line to its end."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, AIOLOADER_KERNELS=args.kernels)
    argv = [sys.executable, "-c", CHILD, str(args.workers), then]
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True) as child:
        line = child.stdout.readline() if child.stdout else ""
        status = child.wait()
        ended = time.time()
    if status != 0 or not line:
        raise RuntimeError(f"the measured script failed with status {status}")
    figures = json.loads(line)
    figures["exit"] = ended - figures.pop("done")
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="cold/warm pairs (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    parser.add_argument("--kernels", choices=("auto", "numba"), default="auto")
    args = parser.parse_args()
    rows: dict[str, list[dict[str, float]]] = {"cold": [], "warm": []}
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="aioloader-numba-") as cache:
            # cold: a new cache; `ready` in another new one, which it fills; warm: the filled one
            for kind, folder in (("cold", "a"), ("warm", "b")):
                figures = measure(os.path.join(cache, folder), args, "exit")
                figures["ready"] = measure(os.path.join(cache, "b"), args, "ready")["ready"]
                rows[kind].append(figures)
    setting = f"kernels={args.kernels}, workers={args.workers}"
    print(f"{setting}, {args.repeat} fresh interpreters each; seconds")
    for kind, values in rows.items():
        for key in ("import", "first_batch", "ready", "exit"):
            column = [v[key] for v in values]
            spread = f"max {max(column):.3f}  all {[round(c, 3) for c in column]}"
            print(f"  {kind:4} {key:12} median {statistics.median(column):.3f}  {spread}")
