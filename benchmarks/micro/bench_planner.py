"""Planning at ImageNet size: time to the first window, planner memory, event-loop lag."""

import asyncio
import bisect
import itertools
import json
import statistics
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio

from aioloader.core import BlockShuffledSampler, ShuffledSampler
from aioloader.sources import KnownFutureCache
from aioloader.sources.cache import HorizonPlanner

from ._common import options

N, SHARDS, BATCH, SEED = 1_281_167, 1_024, 256, 0
SIZES = [N // SHARDS + (1 if k < N % SHARDS else 0) for k in range(SHARDS)]
HEADER, SAMPLE = 512, 64  # bytes of a tar header and of a sample: small, bookkeeping is measured
RESULTS = Path(__file__).parents[1] / "results"
MARKDOWN = (  # planner.md, then a ROW per sampler
    f"# Planning at ImageNet size ({N:,} samples, {SHARDS:,} shards, batch {BATCH})\n\n"
    "Command: `python -m benchmarks.micro.bench_planner{options}`\n\n"  # filled at the end
    "Targets: first window <= 0.2 s, planner <= 64 MiB, no loop turn blocked > 5 ms.\n\n"
    "| sampler | first window s | full horizon s | planner peak MiB | arrays MiB "
    "| longest turn CPU ms | longest turn wall ms | turns > 5 ms CPU / wall / all "
    "| probe lateness p99 / max ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
)
ROW = (
    "| {name} | {first_window_s:.3f} | {full_horizon_s:.3f} | {planner_peak_mib:.1f} "
    "| {planner_arrays_mib:.2f} | {turn_max_cpu_ms:.1f} | {turn_max_wall_ms:.1f} "
    "| {turns_over_5ms_cpu:.0f} / {turns_over_5ms_wall:.0f} / {turns:.0f} "
    "| {probe_lateness_p99_ms:.1f} / {probe_lateness_max_ms:.1f} |"
)


class SyntheticShards:
    """``RangeSource`` of shards of ``SIZES`` samples (a header and ``SAMPLE`` zeros each)."""

    def __init__(self) -> None:
        self.starts = [0, *itertools.accumulate(SIZES)]
        self.keys = [f"shard-{k:04d}.tar" for k in range(SHARDS)]
        self.numbers = {key: k for k, key in enumerate(self.keys)}

    def __len__(self) -> int:
        return self.starts[-1]

    def span_of(self, index: int) -> tuple[str, int, int]:
        shard = bisect.bisect_right(self.starts, index) - 1
        offset = (index - self.starts[shard]) * (HEADER + SAMPLE) + HEADER
        return self.keys[shard], offset, offset + SAMPLE

    def indices_within(self, key: str, start: int, end: int) -> range:
        shard = self.numbers[key]
        first = max(0, -(-(start - HEADER) // (HEADER + SAMPLE)))
        stop = min(SIZES[shard], (end - HEADER - SAMPLE) // (HEADER + SAMPLE) + 1)
        return range(self.starts[shard] + first, self.starts[shard] + max(first, stop))

    def versions(self) -> tuple[tuple[str, str], ...]:
        return tuple((key, "v1") for key in self.keys)

    async def read_range(self, key: str, start: int, end: int) -> bytes:
        await anyio.lowlevel.checkpoint()
        return bytes(end - start)


def new_cache() -> KnownFutureCache:
    return KnownFutureCache(64 << 20, readahead_bytes=64 << 20, lookahead_steps=16)


def new_planner(sampler: Any) -> HorizonPlanner:
    """The planner ``new_cache()`` makes (its window and horizon), on its own."""
    cache = new_cache()
    return HorizonPlanner(
        sampler, SEED, 0, window_steps=cache.window_steps, windows=cache.horizon_windows, slack=256
    )


def plan_figures(sampler: Any, repeats: int) -> dict[str, float]:
    firsts, fulls = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        new_cache().plan(sampler, SEED, 0)  # what the loader runs when a stream starts
        firsts.append(time.perf_counter() - started)
        started = time.perf_counter()
        new_planner(sampler).fill()
        fulls.append(time.perf_counter() - started)
    tracemalloc.start()
    planner = new_planner(sampler)
    planner.fill()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {
        "first_window_s": statistics.median(firsts),
        "full_horizon_s": statistics.median(fulls),
        "planner_peak_mib": peak / 2**20,
        "planner_arrays_mib": planner.nbytes / 2**20,
    }


async def loop_lag(sampler: Any, steps: int) -> dict[str, float]:
    """Read ``steps`` batches through the cache, timing every event-loop turn (one callback)
    by wall time and by CPU time (the loop thread's own work), and a probe's lateness."""
    cache, lags, done, wall, cpu = new_cache(), [], asyncio.Event(), [], []
    cache.bind(SyntheticShards())
    run = asyncio.events.Handle._run

    def timed(handle: asyncio.events.Handle) -> None:
        started, used = time.perf_counter(), time.thread_time()
        run(handle)
        wall.append(time.perf_counter() - started)
        cpu.append(time.thread_time() - used)

    async def probe() -> None:  # late when queued behind other turns
        while not done.is_set():
            asked = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - asked - 0.001)

    batches = [sampler.indices(SEED, 0, step).tolist() for step in range(steps)]
    asyncio.events.Handle._run = timed  # type: ignore[method-assign,assignment]
    try:
        prober = asyncio.ensure_future(probe())
        await asyncio.sleep(0.01)
        await anyio.to_thread.run_sync(cache.plan, sampler, SEED, 0)
        for batch in batches:
            await cache.read(batch)
        done.set()
        await prober
    finally:
        asyncio.events.Handle._run = run  # type: ignore[method-assign]
    lags.sort()
    return {
        "turn_max_cpu_ms": 1000 * max(cpu),
        "turn_max_wall_ms": 1000 * max(wall),
        "turns_over_5ms_cpu": float(sum(t > 0.005 for t in cpu)),
        "turns_over_5ms_wall": float(sum(t > 0.005 for t in wall)),
        "turns": float(len(cpu)),
        "probe_lateness_p99_ms": 1000 * lags[int(0.99 * (len(lags) - 1))],
        "probe_lateness_max_ms": 1000 * lags[-1],
        "planner_arrays_after_mib": cache.statistics().planner_bytes / 2**20,
    }


if __name__ == "__main__":
    args = options(__doc__, steps=300, repeats=3)
    samplers: dict[str, Any] = {"global shuffle": ShuffledSampler(N, BATCH)}
    samplers["block shuffle, window 4"] = BlockShuffledSampler(SIZES, BATCH, window=4)
    rows = {}
    for name, sampler in samplers.items():
        rows[name] = row = plan_figures(sampler, args.repeats)
        row.update(asyncio.run(loop_lag(sampler, args.steps)))
        print(name, {k: round(v, 3) for k, v in row.items()})
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "planner.json").write_text(json.dumps(rows, indent=2) + "\n")
    options = f" --steps {args.steps} --repeats {args.repeats}"
    text = MARKDOWN.format(options=options) + "\n".join(
        ROW.format(name=name, **row) for name, row in rows.items()
    )
    (RESULTS / "planner.md").write_text(text + "\n")
    print(text)
