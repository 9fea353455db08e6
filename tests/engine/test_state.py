"""aioloader.engine._state: load_state_dict checks each field before the fingerprint."""

from __future__ import annotations

from typing import Any

import pytest

from aioloader.core import SequentialSampler
from aioloader.engine import DataLoader
from aioloader.testing import MemoryDataset, StackCollator


def make_loader() -> DataLoader[Any, Any]:
    return DataLoader(
        MemoryDataset(list(range(8))), SequentialSampler(8, 2), StackCollator(), seed=3
    )


@pytest.mark.parametrize(
    ("field", "value", "error", "message"),
    [
        (
            "next_step",
            -5,
            ValueError,
            r"state\['next_step'\] must be an integer in \[0, 2\^64\) but got -5",
        ),
        (
            "next_step",
            "4",
            TypeError,
            r"state\['next_step'\] must be an integer but got str \('4'\)",
        ),
        ("next_step", 2.0, TypeError, r"state\['next_step'\] must be an integer but got float"),
        ("next_step", True, TypeError, r"state\['next_step'\] must be an integer but got a bool"),
        ("seed", -1, ValueError, r"state\['seed'\] must be an integer in \[0, 2\^64\) but got -1"),
        ("version", 99, ValueError, r"state\['version'\] must be 1 or 2 .* but got 99"),
        ("version", True, ValueError, r"state\['version'\] must be 1 or 2 .* but got True"),
        ("fingerprint", None, TypeError, r"state\['fingerprint'\] must be the str .* NoneType"),
    ],
)
def test_a_bad_field_is_named_before_the_fingerprint(
    field: str, value: Any, error: type[Exception], message: str
) -> None:
    saved = {**make_loader().state_dict(), "fingerprint": "not this stream", field: value}
    loader = make_loader()
    with pytest.raises(error, match=message):
        loader.load_state_dict(saved)
    assert loader.next_step == 0


def test_a_good_state_still_resumes_and_a_foreign_one_names_the_fingerprint() -> None:
    loader = make_loader()
    loader.load_state_dict({**loader.state_dict(), "next_step": 5})
    assert loader.next_step == 5
    with pytest.raises(ValueError, match=r"state\['fingerprint'\] must match this loader's stream"):
        loader.load_state_dict({**loader.state_dict(), "fingerprint": "0" * 16})
