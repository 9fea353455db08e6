"""aioloader.cli._tuning: the "How many workers?" model and the batch-noise formula."""

from __future__ import annotations

import itertools
import statistics

import pytest

from aioloader.cli._tuning import epoch_time, gradient_noise_variance, recommend_workers


def test_background_example() -> None:
    assert recommend_workers(0.040, 0.015) == 3
    assert epoch_time(0.040, 0.015, 12, 0).epoch_seconds == pytest.approx(0.660)
    assert epoch_time(0.040, 0.015, 12, 3).epoch_seconds == pytest.approx(0.220)
    assert epoch_time(0.040, 0.015, 12, 4).epoch_seconds == pytest.approx(0.220)
    one = epoch_time(0.040, 0.015, 12, 1)
    assert one.epoch_seconds == pytest.approx(12 * 0.040 + 0.015)
    assert epoch_time(0.040, 0.015, 12, 3).trainer_wait_seconds == pytest.approx(0.040)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match=r"^step must be > 0 seconds but got 0"):
        recommend_workers(0.04, 0)
    with pytest.raises(ValueError, match=r"^batches must be >= 1 but got 0$"):
        epoch_time(0.04, 0.01, 0, 1)


GRADIENTS = [0.9, -0.3, 1.6, 0.2, -1.1, 0.7, 2.0, 0.4]


@pytest.mark.parametrize("batch_size", [1, 2, 4, 8])
def test_batch_noise_matches_every_possible_batch(batch_size: int) -> None:
    assert statistics.fmean(GRADIENTS) == pytest.approx(0.55)
    means = [statistics.fmean(c) for c in itertools.combinations(GRADIENTS, batch_size)]
    assert statistics.fmean(means) == pytest.approx(0.55)  # unbiased
    assert gradient_noise_variance(GRADIENTS, batch_size) == pytest.approx(
        statistics.pvariance(means), abs=1e-12
    )


def test_batch_noise_values_and_bad_input() -> None:
    expected = [0.8675, 0.3717857142857143, 0.12392857142857143, 0.0]
    got = [gradient_noise_variance(GRADIENTS, b) for b in (1, 2, 4, 8)]
    assert got == pytest.approx(expected, abs=1e-12)
    with pytest.raises(ValueError, match=r"^batch_size must be in \[1, 8\] but got 9$"):
        gradient_noise_variance(GRADIENTS, 9)


def reference_epoch(load: float, step: float, batches: int, workers: int) -> float:
    """The model step by step: batch b is ready at load * (b // workers + 1)."""
    finished = 0.0
    for index in range(batches):
        finished = max(finished, load * (index // workers + 1)) + step
    return finished


@pytest.mark.parametrize("workers", [1, 2, 3, 5, 16, 40])
@pytest.mark.parametrize("batches", [1, 2, 7, 12, 33])
@pytest.mark.parametrize(("load", "step"), [(0.040, 0.015), (0.01, 0.03), (0.02, 0.01)])
def test_closed_form_equals_the_step_by_step_model(
    load: float, step: float, batches: int, workers: int
) -> None:
    estimate = epoch_time(load, step, batches, workers)
    assert estimate.epoch_seconds == pytest.approx(reference_epoch(load, step, batches, workers))


def test_huge_epochs_take_no_time() -> None:
    estimate = epoch_time(0.040, 0.015, 2**40, 3)
    assert estimate.epoch_seconds == pytest.approx(0.040 + 2**40 * 0.015)
