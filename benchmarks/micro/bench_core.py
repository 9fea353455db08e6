"""Core speed: Shuffled indices per second over 2^40 items, Bucketed plan build time."""

import sys
import time
from pathlib import Path

import numpy as np

from aioloader.core import BucketedSampler, ShuffledSampler

sys.path.insert(0, str(Path(__file__).parents[2]))  # run by path: the repo root, for benchmarks
from benchmarks.micro._common import options, spread


def shuffled_indices_per_second(steps: int = 2000) -> float:
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


if __name__ == "__main__":
    rounds = options(__doc__, rounds=5).rounds
    shuffled = [shuffled_indices_per_second() for _ in range(rounds)]
    plan_6 = [bucketed_plan_seconds(10**6) for _ in range(rounds)]
    plan_7 = [bucketed_plan_seconds(10**7) for _ in range(max(1, rounds // 2))]
    print("| measure | median | min | max |\n|---|---|---|---|")
    print(f"| Shuffled(2^40, 1024) indices/s | {spread(shuffled, ',.0f')} |")
    print(f"| Bucketed plan n=10^6 (s) | {spread(plan_6, '.3f')} |")
    print(f"| Bucketed plan n=10^7 (s) | {spread(plan_7, '.3f')} |")
