"""What ``transform(x, rng)`` costs over ``transform(x)``: the per-batch generators.

Run: ``PYTHONPATH=. python benchmarks/micro/transform_rng.py [--repeats 5]``.

Two measurements, each the best of ``--repeats`` passes over 32 steps of W1u (2,048 line
images, batch 128), in CPU time of this thread (``time.thread_time``):

- the generators alone, interleaved: the keys of a step (``plan.transform_keys()``) then
  one checked ``SampleRng(key)`` per sample (what the engine did), against the same keys
  then ``sample_rngs`` (what it does);
- whole steps built with the engine's ``build_batch`` and W1u's user code (``x * 1.5 +
  0.25`` per sample, a pad-and-stack collate), with ``transform(x)`` and with the same work
  behind ``transform(x, rng)``. On a loaded machine the second moves with the load far
  more than the generators cost; the first is the figure to read.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aioloader.core import SampleRng, ShuffledSampler, plan_batch
from aioloader.core._rng import sample_rngs
from aioloader.datasets import line_images
from aioloader.engine._build import SamplesOnlyCollator, build_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the workloads
from workloads.w1u_user_code import collate, transform, transform_with_rng

IMAGES, BATCH, STEPS = 2048, 128, 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    data = [s.image for s in line_images(IMAGES, 32, 64, 256, seed=0)._samples]
    sampler = ShuffledSampler(IMAGES, BATCH)
    plans = [plan_batch(sampler, 0, g) for g in range(STEPS)]
    batches = [[data[i] for i in plan.indices.tolist()] for plan in plans]
    collator = SamplesOnlyCollator(collate)

    def best(function: Callable[..., Any], takes_rng: bool) -> float:
        fastest = float("inf")
        for _ in range(args.repeats):
            started = time.thread_time()
            for plan, samples in zip(plans, batches, strict=True):
                build_batch(plan, samples, function, collator, takes_rng)
            fastest = min(fastest, (time.thread_time() - started) / STEPS)
        return fastest * 1e6

    def per_sample(make: Callable[[list[int]], Any]) -> float:
        fastest = float("inf")
        for _ in range(args.repeats):
            started = time.thread_time()
            for plan in plans:
                make(plan.transform_keys().tolist())
            fastest = min(fastest, (time.thread_time() - started) / STEPS / BATCH)
        return fastest * 1e9

    checked = new = float("inf")
    for _ in range(3):  # interleaved
        checked = min(checked, per_sample(lambda keys: [SampleRng(key) for key in keys]))
        new = min(new, per_sample(sample_rngs))
    print(
        f"generators, keys included: one SampleRng(key) per sample {checked:,.0f} ns per sample; "
        f"sample_rngs {new:,.0f} ns per sample ({checked / new:.1f}x)"
    )
    plain, with_rng = best(transform, False), best(transform_with_rng, True)
    print(
        f"transform(x): {plain:,.0f} us/batch; transform(x, rng): {with_rng:,.0f} us/batch; "
        f"difference {(with_rng - plain) / BATCH * 1e3:,.0f} ns per sample"
    )


if __name__ == "__main__":
    main()
