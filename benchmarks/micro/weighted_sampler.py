"""What WeightedRandomSampler costs at 10^7 weights: time and peak memory (docs/samplers.md).

Without replacement an epoch is planned at its first step (keys, partial sort); the figure
is that first call. With replacement nothing is planned per epoch: the constructor sums the
weights, and each step draws its batch; the figures are the constructor and one step (and,
with ``--whole``, every step of an epoch of ``n`` draws). Peak memory is what tracemalloc
sees numpy allocate during the call, beyond the sampler's own weights.
"""

import argparse
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

from aioloader.core import WeightedRandomSampler


def measured(work: Callable[[], Any]) -> tuple[Any, float, float]:
    """``work()``'s result, wall seconds and peak traced MB."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    started = time.perf_counter()
    result = work()
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return result, seconds, peak


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10**7)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument(
        "--whole", action="store_true", help="also every step of a replacement epoch"
    )
    options = parser.parse_args()
    n, batch = options.n, options.batch
    weights = np.random.default_rng(0).lognormal(0.0, 1.0, n)
    for replacement in (False, True):
        sampler, built, built_mb = measured(
            lambda r=replacement: WeightedRandomSampler(weights, n, batch, replacement=r)
        )
        _, first, first_mb = measured(lambda s=sampler: s.indices(0, 0, 0))
        print(
            f"n={n:,} replacement={replacement}: constructor {built:.3f} s {built_mb:.0f} MB, "
            f"first step (plans the epoch) {first:.3f} s {first_mb:.0f} MB"
        )
        if replacement and options.whole:
            steps = sampler.steps_per_epoch
            _, whole, whole_mb = measured(
                lambda s=sampler, t=steps: [s.indices(0, 0, step) for step in range(t)]
            )
            print(f"  every step of the epoch ({steps:,} steps): {whole:.3f} s {whole_mb:.0f} MB")
