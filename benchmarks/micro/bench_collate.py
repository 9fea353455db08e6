"""Collation throughput on the W1 line-image workload (docs/benchmarks.md), against plain copies."""

import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

from aioloader.core import ShuffledSampler, plan_batch
from aioloader.core._image_ops import GainOffset
from aioloader.core._images import ImageBatchCollator, ImageSample

sys.path.insert(0, str(Path(__file__).parents[2]))  # run by path: the repo root, for benchmarks
from benchmarks.micro._common import options

N_IMAGES, HEIGHT, BATCH, MULTIPLE, SEED = 2048, 32, 128, 4, 1234
EPOCHS, WARMUP = 4, 2048  # passes over the batches a round; steps before tracing allocations


def measure(step: Callable[[int], None], count: int, rounds: int) -> tuple[float, float, int]:
    """Median steps/s over ``rounds`` of ``count`` steps (after an untimed pass); then, after
    ``WARMUP`` more, bytes retained per step and the peak above the start (tracemalloc)."""
    for k in range(count):
        step(k)
    rates = []
    for _ in range(rounds):
        started = time.perf_counter()
        for k in range(count):
            step(k)
        rates.append(count / (time.perf_counter() - started))
    for k in range(WARMUP):  # pool size classes held, numpy's small-object caches filled
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
    return statistics.median(rates), (after - before) / count, peak - before


if __name__ == "__main__":
    rounds = options(__doc__, rounds=7).rounds
    rng = np.random.default_rng(SEED)
    data = [
        ImageSample(
            rng.random((1, HEIGHT, int(w)), dtype=np.float32),
            rng.integers(1, 80, size=1 + i % 12).astype(np.int32),  # a CTC target
            i % 10,
        )
        for i, w in enumerate(rng.integers(64, 257, size=N_IMAGES))
    ]
    sampler = ShuffledSampler(N_IMAGES, BATCH)
    plans = [plan_batch(sampler, SEED, g) for g in range(sampler.steps_per_epoch)]
    batches = [[data[i] for i in plan.indices.tolist()] for plan in plans]
    steps, real_bytes = len(plans), [sum(s.image.nbytes for s in b) for b in batches]
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

    def collate(collator: ImageBatchCollator) -> Callable[[int], None]:
        return lambda k: collator(batches[k % steps], plans[k % steps]).release()

    gain = GainOffset(0.1, 0.1)
    # a plain callable has no ``augment_batch``: the collator takes the per-sample path
    per_sample = ImageBatchCollator(MULTIPLE, augment=lambda scratch, key: gain(scratch, key))
    paths = {
        "np.copyto per image (floor)": copy_per_image,
        "np.copyto of all bytes at once": copy_flat,
        "collate, no augmentation": collate(ImageBatchCollator(MULTIPLE)),
        "collate + GainOffset, vectorised": collate(ImageBatchCollator(MULTIPLE, augment=gain)),
        "collate + GainOffset, per sample": collate(per_sample),
    }
    results = {  # the per-sample path is slow: one pass over the batches a round
        name: measure(step, steps if name.endswith("per sample") else EPOCHS * steps, rounds)
        for name, step in paths.items()
    }
    per_image, flat = [rate for rate, _, _ in results.values()][:2]  # the two floors
    mean_mb = sum(real_bytes) / len(real_bytes) / 1e6
    print(
        f"\n{N_IMAGES} images C=1 H={HEIGHT} W=64..256, batch {BATCH}, width multiple "
        f"{MULTIPLE}, {mean_mb:.2f} MB of pixels per batch; medians of {rounds} rounds\n"
    )
    print(
        "| path | batches/s | ms/batch | time vs per-image copyto | time vs one copyto "
        "| net bytes/batch | peak bytes above start |\n|---|---:|---:|---:|---:|---:|---:|"
    )
    for name, (rate, net, peak) in results.items():
        print(
            f"| {name} | {rate:,.0f} | {1e3 / rate:.3f} | {per_image / rate:.2f}x "
            f"| {flat / rate:.2f}x | {net:,.0f} | {peak:,} |"
        )
