"""What ``transform(x, rng)`` costs over ``transform(x)`` (docs/benchmarks.md).

Each figure is the least CPU time of this thread over ``--repeats`` passes of 32 W1u steps.
On a loaded machine whole steps move with the load far more than the generators cost.
"""

import argparse
import sys
import time
from pathlib import Path

from aioloader.core import SampleRng, ShuffledSampler, plan_batch
from aioloader.core._rng import sample_rngs
from aioloader.datasets import line_images
from aioloader.engine._build import SamplesOnlyCollator, build_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the workloads
from workloads.w1u_user_code import collate, transform, transform_with_rng

BATCH, STEPS = 128, 32


def per_step(repeats: int, work, *arguments) -> float:
    """The least thread CPU seconds per step of ``repeats`` calls of ``work(*arguments)``."""
    fastest = float("inf")
    for _ in range(repeats):
        started = time.thread_time()
        work(*arguments)
        fastest = min(fastest, time.thread_time() - started)
    return fastest / STEPS


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    images = [sample.image for sample in line_images(2048, 32, 64, 256, seed=0)._samples]
    sampler = ShuffledSampler(len(images), BATCH)
    plans = [plan_batch(sampler, 0, step) for step in range(STEPS)]
    batches = [[images[i] for i in plan.indices.tolist()] for plan in plans]
    collator = SamplesOnlyCollator(collate)

    def generators(make) -> None:  # the keys of each step, then its generators
        for plan in plans:
            make(plan.transform_keys().tolist())

    def steps(function, takes_rng: bool) -> None:
        for plan, samples in zip(plans, batches, strict=True):
            build_batch(plan, samples, function, collator, takes_rng)

    old = new = float("inf")
    for _ in range(3):  # interleaved
        checked = per_step(repeats, generators, lambda keys: [SampleRng(key) for key in keys])
        old = min(old, checked / BATCH * 1e9)  # one checked generator a sample: what the engine did
        new = min(new, per_step(repeats, generators, sample_rngs) / BATCH * 1e9)
    print(
        f"generators, keys included: one SampleRng(key) per sample {old:,.0f} ns per sample; "
        f"sample_rngs {new:,.0f} ns per sample ({old / new:.1f}x)"
    )
    plain = per_step(repeats, steps, transform, False) * 1e6
    with_rng = per_step(repeats, steps, transform_with_rng, True) * 1e6
    print(
        f"transform(x): {plain:,.0f} us/batch; transform(x, rng): {with_rng:,.0f} us/batch; "
        f"difference {(with_rng - plain) / BATCH * 1e3:,.0f} ns per sample"
    )
