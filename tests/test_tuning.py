"""aioloader._tuning: the background text's "How many workers?" example."""

from __future__ import annotations

import pytest

from aioloader._tuning import epoch_time, recommend_workers


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
