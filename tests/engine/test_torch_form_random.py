"""aioloader.engine._global_random: a first batch that draws from a global generator warns
once (``GlobalRandomWarning``); one that does not, does not."""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from aioloader import DataLoader, GlobalRandomWarning, SequentialSampler, takes_rng
from aioloader.engine._global_random import changed, global_states

DRAWS: dict[str, Callable[[], float]] = {
    "random": random.random,
    "numpy.random": lambda: float(np.random.random()),
    "torch": lambda: float(torch.rand(())),
}


class Jittered:
    """A torch-style dataset whose ``__getitem__`` draws with ``draw`` (a random crop would)."""

    def __init__(self, draw: Callable[[], float] | None) -> None:
        self.draw = draw

    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> float:
        return index + (self.draw() if self.draw is not None else 0.0)


def run_epochs(loader: Any, epochs: int = 2) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(epochs):
            for _batch in loader:
                pass
    return [warning for warning in caught if issubclass(warning.category, GlobalRandomWarning)]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("generator", sorted(DRAWS))
def test_a_dataset_drawing_from_a_global_generator_warns_once(generator: str, workers: int) -> None:
    loader: DataLoader[Any, Any] = DataLoader(
        Jittered(DRAWS[generator]), batch_size=4, num_workers=workers
    )
    caught = run_epochs(loader)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"global random generator(s) of {generator}," in message
    assert "@takes_rng" in message
    assert "docs/from-torch.md" in message
    assert run_epochs(loader) == []  # once per loader


def test_a_dataset_that_draws_nothing_does_not_warn() -> None:
    loader: DataLoader[Any, Any] = DataLoader(Jittered(None), batch_size=4, shuffle=True)
    assert run_epochs(loader) == []


def test_the_fix_draws_from_the_sample_rng_and_does_not_warn() -> None:
    @takes_rng
    def jitter(sample: float, rng: Any) -> float:
        return sample + float(rng.next_double())

    def make() -> DataLoader[Any, Any]:
        return DataLoader(Jittered(None), batch_size=4, transform=jitter, seed=3)

    loader = make()
    assert run_epochs(loader) == []
    first = [batch.tolist() for batch in make()]
    assert first == [batch.tolist() for batch in make()]  # the same on every run


def test_a_transform_or_collator_drawing_warns_in_the_sampler_form_too() -> None:
    def collate(samples: list[int]) -> list[float]:
        return [sample + random.random() for sample in samples]

    loader: DataLoader[Any, Any] = DataLoader(
        list(range(8)), SequentialSampler(8, 4), collate, seed=0, workers=1
    )
    assert len(run_epochs(loader)) == 1


def test_states_compare_by_value() -> None:
    before = global_states()
    assert changed(before, global_states()) == []
    random.random()
    np.random.random()
    torch.rand(())
    assert changed(before, global_states()) == ["random", "numpy.random", "torch"]
