"""What ``transform(x, rng)`` costs over ``transform(x)``: the per-batch generators.

Run: ``PYTHONPATH=. python benchmarks/micro/transform_rng.py [--repeats 5]``.

W1u's data and user code (2,048 line images, batch 128, ``x * 1.5 + 0.25`` per sample, a
pad-and-stack collate), built step by step with the engine's ``build_batch`` on this
thread: once with the one-argument transform, once with the same work behind
``transform(x, rng)``, where the engine derives a ``SampleRng`` for every sample. Prints
the best of ``--repeats`` passes over 32 steps, in CPU microseconds per batch
(``time.thread_time``), and the difference per sample.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from aioloader.core import ShuffledSampler, plan_batch
from aioloader.datasets import line_images
from aioloader.engine._build import SamplesOnlyCollator, build_batch

IMAGES, BATCH, STEPS = 2048, 128, 32


def transform(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return x * np.float32(1.5) + np.float32(0.25)


def transform_with_rng(x: np.ndarray[Any, Any], rng: Any) -> np.ndarray[Any, Any]:
    return transform(x)


def collate(samples: Sequence[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    width = max(sample.shape[-1] for sample in samples)
    width += -width % 4
    out = np.zeros((len(samples), *samples[0].shape[:2], width), dtype=np.float32)
    for row, sample in enumerate(samples):
        out[row, :, :, : sample.shape[-1]] = sample
    return out


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

    plain, with_rng = best(transform, False), best(transform_with_rng, True)
    print(
        f"transform(x): {plain:,.0f} us/batch; transform(x, rng): {with_rng:,.0f} us/batch; "
        f"difference {(with_rng - plain) / BATCH * 1e3:,.0f} ns per sample"
    )


if __name__ == "__main__":
    main()
