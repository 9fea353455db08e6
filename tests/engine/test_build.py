"""aioloader.engine._build: a collator is called as (samples) or, marked @takes_plan, as
(samples, plan); a transform as (sample) or, marked @takes_rng, as (sample, rng). Today's
two-parameter form still gets them, with a DeprecationWarning (one test here)."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import anyio
import numpy as np
import pytest

from aioloader.core import BatchPlan, SequentialSampler, plan_batch, takes_plan, takes_rng
from aioloader.engine import DataLoader
from aioloader.engine._build import SamplesOnlyCollator, collator_takes_plan, transform_takes_rng

from .helpers import make_samples


def one(samples: Sequence[Any]) -> Any:
    return np.stack(samples)


@takes_plan
def two(samples: Sequence[Any], plan: BatchPlan) -> Any:
    return np.stack(samples) + plan.global_step


@takes_plan
def optional_plan(samples: Sequence[Any], plan: BatchPlan | None = None) -> Any:
    return np.stack(samples)


@takes_plan
def star(*args: Any) -> Any:
    return np.stack(args[0])


def optional_other(samples: Sequence[Any], axis: int = 0) -> Any:
    return np.stack(samples, axis)


class Method:
    def __call__(self, samples: Sequence[Any]) -> Any:
        return np.stack(samples)


def test_the_marker_decides() -> None:
    collators = (one, Method(), two, optional_plan, star, optional_other)
    assert [collator_takes_plan(c) for c in collators] == [False, False, True, True, True, False]


def test_an_option_in_second_place_or_an_unreadable_signature_gets_the_samples_only() -> None:
    # numpy.stack(arrays, axis=0): the second parameter is an option, not the plan
    assert [collator_takes_plan(c) for c in (np.stack, np.concatenate, np.vstack)] == [
        False,
        False,
        False,
    ]
    assert collator_takes_plan(max) is False  # a builtin without a readable signature


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("collator", [np.stack, np.concatenate], ids=["stack", "concatenate"])
def test_a_numpy_function_is_a_collator(workers: int, collator: Any) -> None:
    samples = make_samples(8)
    loader = DataLoader(samples, SequentialSampler(8, 2), collator, seed=0, workers=workers)
    batches = list(loader.iter_sync(0, 4))
    assert [batch.tolist() for batch in batches] == [
        collator(samples[2 * step : 2 * step + 2]).tolist() for step in range(4)
    ]


def test_a_transform_gets_its_rng_only_when_marked() -> None:
    @takes_rng
    def required(sample: Any, rng: Any) -> Any:
        return sample

    @takes_rng
    def named(sample: Any, rng: Any = None) -> Any:
        return sample

    def option(sample: Any, scale: float = 1.0) -> Any:
        return sample

    transforms = (required, named, option, np.asarray, max, takes_rng(lambda *args: args[0]))
    assert [transform_takes_rng(t) for t in transforms] == [True, True, False, False, False, True]


def test_the_deprecated_two_parameter_form_still_gets_its_argument() -> None:
    def required(sample: Any, rng: Any) -> Any:
        return sample

    def named(sample: Any, rng: Any = None) -> Any:
        return sample

    def plan_too(samples: Sequence[Any], plan: BatchPlan | None = None) -> Any:
        return samples

    transforms = (required, named, lambda *args: args[0])
    collators = (plan_too, lambda *args: args[0])
    with pytest.warns(DeprecationWarning, match=r"because of its signature, which is deprecated"):
        got = (
            [transform_takes_rng(t) for t in transforms],
            [collator_takes_plan(c) for c in collators],
        )
    assert got == ([True, True, True], [True, True])


@pytest.mark.parametrize("workers", [0, 2])
def test_a_numpy_function_is_a_transform(workers: int) -> None:
    samples = [list(range(i, i + 3)) for i in range(8)]
    stack: Any = np.stack
    loader: DataLoader[Any, Any] = DataLoader(
        samples, SequentialSampler(8, 2), stack, seed=0, transform=np.asarray, workers=workers
    )
    batches = list(loader.iter_sync(0, 2))
    assert [batch.tolist() for batch in batches] == [samples[0:2], samples[2:4]]


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
