"""Host-to-GPU transfer of a W1 line-image batch: pageable vs pinned, blocking vs not.

Run on a machine with CUDA: python benchmarks/micro/bench_transfer.py [--rounds 50]
docs/benchmarks.md (micro-benchmarks) says what it measures.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch


def spec_batch() -> dict[str, np.ndarray]:
    """A batch shaped like W1: images [128, 1, 32, 256] float32 plus the int32 fields."""
    generator = np.random.default_rng(0)
    return {
        "images": generator.random((128, 1, 32, 256), dtype=np.float32),
        "widths": generator.integers(64, 257, 128).astype(np.int32),
        "targets": generator.integers(1, 80, 900).astype(np.int32),
        "labels": generator.integers(0, 10, 128).astype(np.int32),
    }


def time_transfer(tensors: dict[str, torch.Tensor], non_blocking: bool, rounds: int) -> list[float]:
    device = torch.device("cuda")
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        started = time.perf_counter()
        moved = {k: v.to(device, non_blocking=non_blocking) for k, v in tensors.items()}
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
        del moved
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return
    batch = spec_batch()
    nbytes = sum(a.nbytes for a in batch.values())
    pageable = {k: torch.from_numpy(v) for k, v in batch.items()}  # shares the numpy memory
    started = time.perf_counter()
    pinned = {k: v.pin_memory() for k, v in pageable.items()}
    pin_seconds = time.perf_counter() - started
    time_transfer(pageable, False, 5)  # warm-up: CUDA context, allocator
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print(f"batch: {nbytes / 2**20:.2f} MiB; pinning it once took {pin_seconds * 1e3:.2f} ms")
    print("| source memory | non_blocking | ms per batch (median) | GiB/s |")
    print("|---|---|---:|---:|")
    for name, tensors in (("pageable", pageable), ("pinned", pinned)):
        for non_blocking in (False, True):
            median = statistics.median(time_transfer(tensors, non_blocking, args.rounds))
            print(
                f"| {name} | {non_blocking} | {median * 1e3:.3f} | {nbytes / median / 2**30:.1f} |"
            )


if __name__ == "__main__":
    main()
