"""W1 through the loader: CPU per batch in GIL-free kernels and GIL-held work (docs/benchmarks.md).

Every compiled kernel is wrapped to add its ``time.thread_time`` (the GIL released); the
process's CPU minus that ran with the GIL held, on any thread.
"""

import argparse
import statistics
import time

import anyio

from aioloader.cli._demo import make_demo_loader
from aioloader.kernels import _batch as _kernels
from aioloader.kernels import _selection as _backend

KERNELS = ("fill_images", "fill_image_batch", "check_image_batch", "image_widths", "permute")
UVLOOP = {"backend": "asyncio", "backend_options": {"use_uvloop": True}}
spent: list[float] = []  # CPU seconds inside the kernels


def timed(kernel):
    def call(*args):
        started = time.thread_time()
        try:
            return kernel(*args)
        finally:
            spent.append(time.thread_time() - started)

    return call


async def measure(workers: int, count: int) -> dict[str, float]:
    """Batches/s and CPU ms per batch of ``count`` batches after 16, in one stream."""
    loader = make_demo_loader(seed=0, workers=workers, prefetch=8)  # W1's loader
    clocks = (time.perf_counter, time.process_time, time.thread_time)
    async with loader.stream(0, 16 + count) as stream:
        seen = 0
        async for batch in stream:
            if seen == 16:
                spent.clear()
                started = [clock() for clock in clocks]
            batch.release()
            seen += 1
        wall, cpu, loop = (clock() - start for clock, start in zip(clocks, started, strict=True))
    per_batch = {"cpu": cpu, "loop": loop, "kernels": sum(spent), "gil": cpu - sum(spent)}
    in_ms = {key: seconds * 1e3 / count for key, seconds in per_batch.items()}
    return {"rate": count / wall, **in_ms}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="0,2", help="comma-separated settings")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    settings = [int(w) for w in args.workers.split(",")]
    _backend.load()
    for name in KERNELS:
        setattr(_kernels, name, timed(getattr(_kernels, name)))
    for workers in settings:  # warm-up: threads, pools, kernels
        anyio.run(measure, workers, 64, **UVLOOP)
    results: dict[int, list[dict[str, float]]] = {w: [] for w in settings}
    for _ in range(args.rounds):
        for workers in settings:
            results[workers].append(anyio.run(measure, workers, 1024, **UVLOOP))
    for workers, rows in results.items():
        med = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
        rates = ", ".join(f"{row['rate']:,.0f}" for row in rows)
        print(
            f"workers={workers}: {med['rate']:,.0f} batches/s ({rates}); CPU ms/batch: "
            f"all {med['cpu']:.3f}, loop thread {med['loop']:.3f}, "
            f"kernels {med['kernels']:.3f}, GIL-held {med['gil']:.3f}"
        )
