"""How many workers, and how noisy is a batch? Two small models behind ``aioloader tune``.

Fixed costs, no start-up time: a worker produces one batch every ``load`` seconds; the
trainer consumes one every ``step`` seconds; at most ``prefetch`` batches wait ahead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class EpochEstimate:
    """The idealised epoch time for one worker count."""

    workers: int
    epoch_seconds: float
    trainer_wait_seconds: float


def epoch_time(load: float, step: float, batches: int, workers: int) -> EpochEstimate:
    """Idealised epoch time with ``workers`` loaders (0: load and step take turns).

    >>> round(epoch_time(0.040, 0.015, 12, 0).epoch_seconds, 3)
    0.66
    >>> round(epoch_time(0.040, 0.015, 12, 3).epoch_seconds, 3)
    0.22
    """
    if load < 0 or step < 0 or math.isnan(load) or math.isnan(step):
        raise ValueError(f"load and step must be >= 0 seconds but got {load!r} and {step!r}")
    if batches < 1:
        raise ValueError(f"batches must be >= 1 but got {batches}")
    if workers < 0:
        raise ValueError(f"workers must be >= 0 but got {workers}")
    if workers == 0:
        total = batches * (load + step)
        return EpochEstimate(0, total, batches * load)
    # Batch b (0-based) is ready at load * (b // workers + 1); the trainer starts step b
    # when both the batch is ready and the previous step has finished, so the epoch ends at
    # max over b of ready(b) + (batches - b) * step. Within a round of ``workers`` batches
    # the first one bounds it; across rounds k the bound is linear in k, so it is the
    # first round's or the last one's: O(1) for any epoch length.
    rounds = -(-batches // workers)
    finished = load + batches * step + max(0.0, (rounds - 1) * (load - workers * step))
    return EpochEstimate(workers, finished, finished - batches * step)


def recommend_workers(load: float, step: float) -> int:
    """The fewest workers that keep up with the trainer: ``ceil(load / step)``.

    >>> recommend_workers(0.040, 0.015)
    3
    """
    if step <= 0:
        raise ValueError(f"step must be > 0 seconds but got {step!r}")
    if load < 0:
        raise ValueError(f"load must be >= 0 seconds but got {load!r}")
    return max(1, math.ceil(load / step - 1e-12))


def gradient_noise_variance(per_example: Sequence[float], batch_size: int) -> float:
    """Variance of a mini-batch mean drawn without replacement: ``s2 / B * (N - B) / (N - 1)``.

    ``s2`` is the population variance of the per-example values (gradients of one weight).

    >>> round(gradient_noise_variance([0.9, -0.3, 1.6, 0.2, -1.1, 0.7, 2.0, 0.4], 2), 6)
    0.371786
    """
    values = [float(v) for v in per_example]
    count = len(values)
    if count < 2:
        raise ValueError(f"per_example must hold at least 2 values but got {count}")
    if not 1 <= batch_size <= count:
        raise ValueError(f"batch_size must be in [1, {count}] but got {batch_size}")
    mean = sum(values) / count
    variance = sum((v - mean) ** 2 for v in values) / count
    return variance / batch_size * (count - batch_size) / (count - 1)
