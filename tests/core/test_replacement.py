"""aioloader.core._replacement: the index that replaces a bad sample."""

from __future__ import annotations

import pytest

from aioloader.core import RngStream, SampleRng, derive
from aioloader.core._replacement import replacement_index


def test_attempt_a_is_the_a_th_draw_of_the_slots_generator() -> None:
    rng = SampleRng(derive(7, 1, 2, 3, RngStream.REPLACE_SAMPLE))
    draws = [rng.next_int(40) for _ in range(4)]
    assert [replacement_index(7, 1, 2, 3, attempt, 40) for attempt in (1, 2, 3, 4)] == draws


def test_pinned_values() -> None:
    assert [replacement_index(7, 0, 0, 3, attempt, 40) for attempt in (1, 2, 3, 4)] == [
        10,
        21,
        3,
        20,
    ]


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match=r"attempt must be an integer in \[1, "):
        replacement_index(7, 0, 0, 3, 0, 40)
    with pytest.raises(ValueError, match=r"items must be an integer in \[1, "):
        replacement_index(7, 0, 0, 3, 1, 0)
