"""Collation throughput on the W1 line-image workload (docs/benchmarks.md), against plain copies.

Run: ``.venv/bin/python benchmarks/micro/bench_collate.py`` (about half a minute).
docs/benchmarks.md (micro-benchmarks) says what it measures.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

from aioloader.core import ShuffledSampler, plan_batch
from aioloader.core._image_ops import GainOffset
from aioloader.core._images import ImageBatchCollator, ImageSample
from aioloader.core._plan import BatchPlan
from aioloader.core._rng import SampleRng

N_IMAGES, HEIGHT, BATCH, MULTIPLE, SEED = 2048, 32, 128, 4, 1234


class PerSampleGainOffset:
    """The same augmentation without ``augment_batch``: forces the per-sample path."""

    def __init__(self, inner: GainOffset) -> None:
        self.inner = inner

    def __call__(self, scratch: np.ndarray[Any, Any], rng: SampleRng) -> None:
        self.inner(scratch, rng)


def make_workload() -> tuple[list[list[ImageSample]], list[BatchPlan]]:
    rng = np.random.default_rng(SEED)
    widths = rng.integers(64, 257, size=N_IMAGES)
    data = [
        ImageSample(
            rng.random((1, HEIGHT, int(w)), dtype=np.float32),
            rng.integers(1, 80, size=1 + i % 12).astype(np.int32),  # a CTC target
            i % 10,
        )
        for i, w in enumerate(widths)
    ]
    sampler = ShuffledSampler(N_IMAGES, BATCH)
    plans = [plan_batch(sampler, SEED, g) for g in range(sampler.steps_per_epoch)]
    batches = [[data[i] for i in plan.indices.tolist()] for plan in plans]
    return batches, plans


def rate(step: Callable[[int], None], count: int, rounds: int) -> list[float]:
    for k in range(count):  # warm-up: pool size classes, caches
        step(k)
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        for k in range(count):
            step(k)
        out.append(count / (time.perf_counter() - start))
    return out


def allocation(step: Callable[[int], None], count: int, warmup: int) -> tuple[float, int]:
    """Net bytes retained per step and peak bytes above the start, after a warm-up."""
    for k in range(warmup):  # untraced: pool classes held, numpy's small caches filled
        step(k)
    tracemalloc.start()
    try:
        for k in range(count):
            step(k)
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for k in range(count):
            step(k)
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return (after - before) / count, peak - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=4, help="passes over the 16 batches")
    parser.add_argument(
        "--warmup", type=int, default=2048, help="steps run under tracemalloc before measuring"
    )
    args = parser.parse_args()
    batches, plans = make_workload()
    steps = len(plans)
    real_bytes = [sum(s.image.nbytes for s in b) for b in batches]
    widest = max(s.image.shape[2] for b in batches for s in b)
    dest = np.empty((BATCH, 1, HEIGHT, -(-widest // MULTIPLE) * MULTIPLE), np.float32)
    flat_src = np.empty(max(real_bytes) // 4, np.float32)
    flat_dst = np.empty_like(flat_src)

    def copy_per_image(k: int) -> None:
        for i, sample in enumerate(batches[k % steps]):
            np.copyto(dest[i, :, :, : sample.image.shape[2]], sample.image)

    def copy_flat(k: int) -> None:
        size = real_bytes[k % steps] // 4
        np.copyto(flat_dst[:size], flat_src[:size])

    def collate_with(collator: ImageBatchCollator) -> Callable[[int], None]:
        def step(k: int) -> None:
            collator(batches[k % steps], plans[k % steps]).release()

        return step

    gain = GainOffset(0.1, 0.1)
    paths: list[tuple[str, Callable[[int], None], int]] = [
        ("np.copyto per image (floor)", copy_per_image, args.epochs * steps),
        ("np.copyto of all bytes at once", copy_flat, args.epochs * steps),
        (
            "collate, no augmentation",
            collate_with(ImageBatchCollator(MULTIPLE)),
            args.epochs * steps,
        ),
        (
            "collate + GainOffset, vectorised",
            collate_with(ImageBatchCollator(MULTIPLE, augment=gain)),
            args.epochs * steps,
        ),
        (
            "collate + GainOffset, per sample",
            collate_with(ImageBatchCollator(MULTIPLE, augment=PerSampleGainOffset(gain))),
            steps,
        ),
    ]
    results = []
    for name, step, count in paths:
        rates = rate(step, count, args.rounds)
        net, peak = allocation(step, count, args.warmup)
        results.append((name, statistics.median(rates), net, peak))
    per_image, flat = results[0][1], results[1][1]
    mean_mb = sum(real_bytes) / len(real_bytes) / 1e6
    print(
        f"\n{N_IMAGES} images C=1 H={HEIGHT} W=64..256, batch {BATCH}, width multiple "
        f"{MULTIPLE}, {mean_mb:.2f} MB of pixels per batch; medians of {args.rounds} rounds\n"
    )
    print(
        "| path | batches/s | ms/batch | time vs per-image copyto | time vs one copyto "
        "| net bytes/batch | peak bytes above start |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, median, net, peak in results:
        print(
            f"| {name} | {median:,.0f} | {1e3 / median:.3f} | {per_image / median:.2f}x "
            f"| {flat / median:.2f}x | {net:,.0f} | {peak:,} |"
        )


if __name__ == "__main__":
    main()
