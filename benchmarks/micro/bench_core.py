"""Core speed: Shuffled indices per second over 2^40 items, Bucketed plan build time.

Run: .venv/bin/python benchmarks/micro/bench_core.py [--rounds 5]
docs/benchmarks.md (micro-benchmarks) says what it measures.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from aioloader.core import BucketedSampler, ShuffledSampler


def shuffled_indices_per_second(steps: int) -> float:
    sampler = ShuffledSampler(2**40, 1024)
    started = time.perf_counter()
    for step in range(steps):
        sampler.indices(7, 3, 10**6 + step)
    return steps * 1024 / (time.perf_counter() - started)


def bucketed_plan_seconds(n: int) -> float:
    lengths = np.random.default_rng(0).lognormal(np.log(200), 1.0, n).astype(np.int64) % 2048
    sampler = BucketedSampler(lengths, 1024, 100)
    started = time.perf_counter()
    sampler.epoch_plan(7, 0)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    shuffled = [shuffled_indices_per_second(args.steps) for _ in range(args.rounds)]
    plan_6 = [bucketed_plan_seconds(10**6) for _ in range(args.rounds)]
    plan_7 = [bucketed_plan_seconds(10**7) for _ in range(max(1, args.rounds // 2))]
    print("| measure | median | min | max |")
    print("|---|---|---|---|")
    print(
        f"| Shuffled(2^40, 1024) indices/s | {statistics.median(shuffled):,.0f} | "
        f"{min(shuffled):,.0f} | {max(shuffled):,.0f} |"
    )
    for name, values in (("10^6", plan_6), ("10^7", plan_7)):
        print(
            f"| Bucketed plan n={name} (s) | {statistics.median(values):.3f} | "
            f"{min(values):.3f} | {max(values):.3f} |"
        )


if __name__ == "__main__":
    main()
