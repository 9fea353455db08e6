"""Planning at ImageNet size: time to the first window, planner memory, event-loop lag.

Run: ``python -m benchmarks.micro.bench_planner [--steps 300] [--repeats 3]``.
docs/benchmarks.md (micro-benchmarks) says what it measures.
"""

from __future__ import annotations

import argparse
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

N, SHARDS, BATCH, SEED = 1_281_167, 1_024, 256, 0
SAMPLE_BYTES = 64  # small: the cache's bookkeeping is measured, not copying
RESULTS = Path(__file__).parents[1] / "results"


class SyntheticShards:
    """``RangeSource`` of ``n`` samples in ``shards`` shards, ``SAMPLE_BYTES`` apart."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.starts = [0, *itertools.accumulate(sizes)]
        self.keys = [f"shard-{k:04d}.tar" for k in range(len(sizes))]
        self.numbers = {key: k for k, key in enumerate(self.keys)}

    def __len__(self) -> int:
        return self.starts[-1]

    def span_of(self, index: int) -> tuple[str, int, int]:
        shard = bisect.bisect_right(self.starts, index) - 1
        offset = (index - self.starts[shard]) * (SAMPLE_BYTES + 512) + 512
        return self.keys[shard], offset, offset + SAMPLE_BYTES

    def indices_within(self, key: str, start: int, end: int) -> range:
        shard = self.numbers[key]
        first = -(-(start - 512) // (SAMPLE_BYTES + 512))
        stop = (end - 512 - SAMPLE_BYTES) // (SAMPLE_BYTES + 512) + 1
        first, stop = max(first, 0), min(stop, self.sizes[shard])
        base = self.starts[shard]
        return range(base + first, base + max(first, stop))

    def versions(self) -> tuple[tuple[str, str], ...]:
        return tuple((key, "v1") for key in self.keys)

    async def read_range(self, key: str, start: int, end: int) -> bytes:
        await anyio.lowlevel.checkpoint()
        return bytes(end - start)


SIZES = [N // SHARDS + (1 if k < N % SHARDS else 0) for k in range(SHARDS)]


def _samplers() -> dict[str, Any]:
    return {
        "global shuffle": ShuffledSampler(N, BATCH),
        "block shuffle, window 4": BlockShuffledSampler(SIZES, BATCH, window=4),
    }


def _cache() -> KnownFutureCache:
    return KnownFutureCache(64 << 20, readahead_bytes=64 << 20, lookahead_steps=16)


def _planner(sampler: Any) -> HorizonPlanner:
    """The planner ``_cache()`` makes (its window and horizon), on its own."""
    cache = _cache()
    return HorizonPlanner(
        sampler,
        SEED,
        0,
        window_steps=cache.window_steps,
        windows=cache.horizon_windows,
        slack=256,
    )


def plan_figures(sampler: Any, repeats: int) -> dict[str, float]:
    firsts, fulls = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        _cache().plan(sampler, SEED, 0)  # what the loader runs when a stream starts
        firsts.append(time.perf_counter() - started)
        started = time.perf_counter()
        _planner(sampler).fill()
        fulls.append(time.perf_counter() - started)
    tracemalloc.start()
    planner = _planner(sampler)
    planner.fill()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return {
        "first_window_s": statistics.median(firsts),
        "full_horizon_s": statistics.median(fulls),
        "planner_peak_mib": peak,
        "planner_arrays_mib": planner.nbytes / 2**20,
    }


class TurnTimer:
    """The longest event-loop turns (one callback each), by wall time and by CPU time.

    CPU time (``time.thread_time``) leaves out what the OS and other threads take from the
    loop's thread (the GIL, other processes): it is the cache's own work per turn.
    """

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self._run = asyncio.events.Handle._run

    def __enter__(self) -> TurnTimer:
        run, wall, cpu = self._run, self.wall, self.cpu

        def timed(handle: asyncio.events.Handle) -> None:
            started, used = time.perf_counter(), time.thread_time()
            run(handle)
            wall.append(time.perf_counter() - started)
            cpu.append(time.thread_time() - used)

        asyncio.events.Handle._run = timed  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.events.Handle._run = self._run  # type: ignore[method-assign]


async def loop_lag(sampler: Any, steps: int) -> dict[str, float]:
    source = SyntheticShards(SIZES)
    cache = _cache()
    cache.bind(source)
    lags: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            asked = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - asked - 0.001)

    batches = [sampler.indices(SEED, 0, step).tolist() for step in range(steps)]
    with TurnTimer() as turns:
        prober = asyncio.ensure_future(probe())
        await asyncio.sleep(0.01)
        await anyio.to_thread.run_sync(cache.plan, sampler, SEED, 0)
        for batch in batches:
            await cache.read(batch)
        done.set()
        await prober
    lags.sort()
    return {
        "turn_max_cpu_ms": 1000 * max(turns.cpu),
        "turn_max_wall_ms": 1000 * max(turns.wall),
        "turns_over_5ms_cpu": float(sum(t > 0.005 for t in turns.cpu)),
        "turns_over_5ms_wall": float(sum(t > 0.005 for t in turns.wall)),
        "turns": float(len(turns.cpu)),
        "probe_lateness_p99_ms": 1000 * lags[int(0.99 * (len(lags) - 1))],
        "probe_lateness_max_ms": 1000 * lags[-1],
        "planner_arrays_after_mib": cache.statistics().planner_bytes / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = {}
    for name, sampler in _samplers().items():
        row = plan_figures(sampler, args.repeats)
        row.update(asyncio.run(loop_lag(sampler, args.steps)))
        rows[name] = row
        print(name, {k: round(v, 3) for k, v in row.items()})
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "planner.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = [
        f"# Planning at ImageNet size ({N:,} samples, {SHARDS:,} shards, batch {BATCH})",
        "",
        "Targets: first window <= 0.2 s, planner <= 64 MiB, no loop turn blocked > 5 ms.",
        "",
        "| sampler | first window s | full horizon s | planner peak MiB | arrays MiB "
        "| longest turn CPU ms | longest turn wall ms | turns > 5 ms CPU / wall / all "
        "| probe lateness p99 / max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['first_window_s']:.3f} | {row['full_horizon_s']:.3f} "
            f"| {row['planner_peak_mib']:.1f} | {row['planner_arrays_mib']:.2f} "
            f"| {row['turn_max_cpu_ms']:.1f} | {row['turn_max_wall_ms']:.1f} "
            f"| {row['turns_over_5ms_cpu']:.0f} / {row['turns_over_5ms_wall']:.0f} / "
            f"{row['turns']:.0f} "
            f"| {row['probe_lateness_p99_ms']:.1f} / {row['probe_lateness_max_ms']:.1f} |"
        )
    (RESULTS / "planner.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
