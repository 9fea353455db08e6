"""aioloader.cli._arguments: one rule, and one message, per argument type."""

from __future__ import annotations

import argparse

import pytest

from aioloader.cli._arguments import non_negative, positive
from tests.cli.helpers import Fail


@pytest.mark.parametrize("text", ["-5", "-1", "0"])
def test_positive_says_the_same_rule_for_every_value_below_one(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        positive(text)
    assert str(caught.value) == f"must be >= 1 but got {int(text)}"


def test_non_negative_and_positive_accept_their_lowest_value() -> None:
    assert non_negative("0") == 0
    assert positive("1") == 1
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be >= 0 but got -1$"):
        non_negative("-1")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be an integer but got '1.5'$"):
        positive("1.5")


@pytest.mark.parametrize("steps", ["-5", "0"])
def test_demo_steps_below_one_get_one_message(fail: Fail, steps: str) -> None:
    assert fail("demo", "--steps", steps) == (
        f"error: argument --steps: must be >= 1 but got {steps} (see 'aioloader demo --help')"
    )
