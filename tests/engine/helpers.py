"""Datasets and collators shared by the engine tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from aioloader import takes_plan, takes_rng
from aioloader.core import BatchPlan, SampleRng, digest_batch


def make_samples(n: int, width: int = 6) -> list[npt.NDArray[np.float32]]:
    """Distinct float32 rows: sample i is i + [0, 0.1, 0.2, ...]."""
    return [np.float32(i) + np.arange(width, dtype=np.float32) / np.float32(10) for i in range(n)]


@takes_rng
def jitter(sample: npt.NDArray[np.float32], rng: SampleRng) -> npt.NDArray[np.float32]:
    """A transform that uses its rng (stream 0)."""
    jittered: npt.NDArray[np.float32] = sample * rng.next_single() + np.float32(rng.next_int(7))
    return jittered


@dataclass
class TrackedBatch:
    """A batch that records whether it was released."""

    global_step: int
    indices: npt.NDArray[np.int64]
    data: npt.NDArray[np.float32]
    released: bool = False

    def release(self) -> None:
        self.released = True

    def __digest_fields__(self) -> list[tuple[str, Any]]:
        return [("global_step", self.global_step), ("indices", self.indices), ("data", self.data)]


@takes_plan
class TrackingCollator:
    """Stacks samples, adds an augmentation draw (stream 1), and remembers every batch."""

    def __init__(self) -> None:
        self.built: list[TrackedBatch] = []

    def __call__(self, samples: Sequence[Any], plan: BatchPlan) -> TrackedBatch:
        keys = plan.augment_keys().tolist()
        noise = np.array([SampleRng(k).next_single() for k in keys], dtype=np.float32)
        data = np.stack(samples) + noise[:, None]
        batch = TrackedBatch(plan.global_step, plan.indices.copy(), data)
        self.built.append(batch)
        return batch


def digests(batches: Sequence[Any]) -> list[str]:
    return [digest_batch(b) for b in batches]
