"""Host-to-GPU transfer of a W1 line-image batch: pageable vs pinned, blocking vs not (CUDA)."""

import argparse
import statistics
import sys
import time

import numpy as np
import torch


def median_seconds(tensors: list[torch.Tensor], non_blocking: bool, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        started = time.perf_counter()
        moved = [tensor.to("cuda", non_blocking=non_blocking) for tensor in tensors]
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
        del moved
    return statistics.median(times)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=50)
    rounds = parser.parse_args().rounds
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        sys.exit()
    generator = np.random.default_rng(0)  # W1's images, widths, CTC targets and labels
    arrays = [
        generator.random((128, 1, 32, 256), dtype=np.float32),
        generator.integers(64, 257, 128).astype(np.int32),
        generator.integers(1, 80, 900).astype(np.int32),
        generator.integers(0, 10, 128).astype(np.int32),
    ]
    nbytes = sum(array.nbytes for array in arrays)
    pageable = [torch.from_numpy(array) for array in arrays]  # shares the numpy memory
    started = time.perf_counter()
    pinned = [tensor.pin_memory() for tensor in pageable]
    pin_ms = (time.perf_counter() - started) * 1e3
    median_seconds(pageable, False, 5)  # warm-up: CUDA context, allocator
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print(f"batch: {nbytes / 2**20:.2f} MiB; pinning it once took {pin_ms:.2f} ms")
    print("| source memory | non_blocking | ms per batch (median) | GiB/s |\n|---|---|---:|---:|")
    for name, tensors in (("pageable", pageable), ("pinned", pinned)):
        for non_blocking in (False, True):
            seconds = median_seconds(tensors, non_blocking, rounds)
            rate = nbytes / seconds / 2**30
            print(f"| {name} | {non_blocking} | {seconds * 1e3:.3f} | {rate:.1f} |")
