"""aioloader.engine._build: a collator is called as (samples, plan) or, torch-style, (samples)."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import anyio
import numpy as np
import pytest

from aioloader.core import BatchPlan, SequentialSampler, plan_batch
from aioloader.engine import DataLoader
from aioloader.engine._build import SamplesOnlyCollator, collator_takes_plan

from .helpers import make_samples


def one(samples: Sequence[Any]) -> Any:
    return np.stack(samples)


def two(samples: Sequence[Any], plan: BatchPlan) -> Any:
    return np.stack(samples) + plan.global_step


def optional_plan(samples: Sequence[Any], plan: BatchPlan | None = None) -> Any:
    return np.stack(samples)


def star(*args: Any) -> Any:
    return np.stack(args[0])


class Method:
    def __call__(self, samples: Sequence[Any]) -> Any:
        return np.stack(samples)


def test_the_signature_decides() -> None:
    assert [collator_takes_plan(c) for c in (one, Method(), two, optional_plan, star)] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert collator_takes_plan(max) is True  # no readable signature: the plan is passed


@pytest.mark.parametrize(
    "collator",
    [lambda: None, lambda a, b, c: None, lambda samples, *, device: None],
    ids=["none", "three", "keyword-only"],
)
def test_a_signature_that_fits_neither_is_refused(collator: Any) -> None:
    with pytest.raises(
        TypeError, match=r"collator must accept collator\(samples, plan\) or collator\(samples\)"
    ):
        DataLoader(make_samples(4), SequentialSampler(4, 2), collator, seed=0)


def test_samples_only_collator_drops_the_plan_and_pickles() -> None:
    wrapped = SamplesOnlyCollator(one)
    plan = plan_batch(SequentialSampler(4, 2), 0, 1)
    assert wrapped(make_samples(2), plan).tolist() == one(make_samples(2)).tolist()
    assert pickle.loads(pickle.dumps(wrapped)).collate is one


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_calls_each_kind_as_it_expects(workers: int) -> None:
    samples = make_samples(8)

    async def first(collator: Any) -> Any:
        loader = DataLoader(samples, SequentialSampler(8, 2), collator, seed=0, workers=workers)
        async with loader.stream(1, 2) as batches:
            async for batch in batches:
                return batch, loader.collator
        raise AssertionError("the stream gave no batch")

    (batch_one, kept), (batch_two, _) = (anyio.run(first, one), anyio.run(first, two))
    assert kept is one  # the loader shows the collator it was given
    assert batch_one.tolist() == np.stack(samples[2:4]).tolist()
    assert batch_two.tolist() == (np.stack(samples[2:4]) + 1).tolist()
