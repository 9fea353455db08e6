"""Explicit markers: @takes_rng / @takes_plan decide what a transform or collator receives;
plain functions get the sample(s) only; today's two-parameter form warns once, naming the fix."""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from aioloader import (
    DataLoader,
    ImageBatchCollator,
    ImageSample,
    PadCollator,
    SequentialSampler,
    TreeCollator,
    takes_plan,
    takes_rng,
)
from aioloader.core import BatchPlan, SampleRng, wants_plan, wants_rng
from aioloader.core._markers import Marked
from aioloader.engine._build import collator_takes_plan, transform_takes_rng
from aioloader.testing import MemoryDataset, StackCollator

SAMPLES = [np.full(3, i, dtype=np.int64) for i in range(8)]


def loader(collator: Any, transform: Any = None, workers: int = 0) -> DataLoader[Any, Any]:
    return DataLoader(
        MemoryDataset(SAMPLES),
        SequentialSampler(8, 2),
        collator,
        seed=3,
        transform=transform,
        workers=workers,
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_np_stack_is_a_collator_and_gives_the_exact_batch(workers: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batches = [b.tolist() for b in loader(np.stack, workers=workers).iter_sync(0, 4)]
    assert batches == [
        [[0] * 3, [1] * 3],
        [[2] * 3, [3] * 3],
        [[4] * 3, [5] * 3],
        [[6] * 3, [7] * 3],
    ]


def test_a_lambda_over_a_list_is_a_collator() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batches = list(loader(lambda samples: sum(int(s[0]) for s in samples)).iter_sync(0, 4))
    assert batches == [1, 5, 9, 13]


def test_marked_collator_gets_the_plan_and_marked_transform_its_rng() -> None:
    @takes_plan
    def stamp(samples: Sequence[Any], plan: BatchPlan) -> Any:
        return plan.global_step, np.stack(samples)[:, 0].tolist()

    @takes_rng
    def jitter(sample: Any, rng: SampleRng) -> Any:
        assert isinstance(rng, SampleRng)
        return sample + rng.next_int(1000) * 0

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = list(loader(stamp, jitter).iter_sync(0, 2))
    assert got == [(0, [0, 1]), (1, [2, 3])]
    assert (wants_plan(stamp), wants_rng(jitter), wants_rng(stamp)) == (True, True, None)


def test_markers_on_classes_builtins_and_slotted_instances() -> None:
    @takes_plan
    class Stamp:
        def __call__(self, samples: Sequence[Any], plan: BatchPlan) -> Any:
            return plan.global_step

    class Sub(Stamp):
        pass

    assert collator_takes_plan(Stamp())
    assert collator_takes_plan(Sub())
    wrapped = takes_rng(max)  # a builtin takes no attribute: wrapped, calls forwarded
    assert isinstance(wrapped, Marked)
    assert wrapped(1, 2) == 2
    assert wants_rng(wrapped)
    assert repr(wrapped) == "takes_rng(<built-in function max>)"
    assert pickle.loads(pickle.dumps(wrapped)).function is max
    with pytest.raises(TypeError, match="takes_plan must mark a callable but got int"):
        takes_plan(3)  # type: ignore[type-var]


def test_a_marked_function_that_cannot_take_the_argument_is_refused() -> None:
    with pytest.raises(TypeError, match=r"collator is marked @takes_plan so must accept"):
        collator_takes_plan(takes_plan(lambda samples: samples))
    with pytest.raises(TypeError, match=r"transform is marked @takes_rng so must accept"):
        transform_takes_rng(takes_rng(lambda sample: sample))


def test_the_two_parameter_form_still_works_and_warns_once_naming_the_fix() -> None:
    def old_collator(samples: Sequence[Any], plan: BatchPlan) -> Any:
        return plan.global_step

    def old_transform(sample: Any, rng: Any) -> Any:
        return sample

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = loader(old_collator, old_transform)
        loader(old_collator, old_transform)  # the same functions: no second warning
    assert {w.category for w in caught} == {DeprecationWarning}
    messages = [str(w.message) for w in caught]
    assert messages == [
        "aioloader: the collator test_the_two_parameter_form_still_works_and_warns_once_naming"
        "_the_fix.<locals>.old_collator gets the plan because of its signature, which is "
        "deprecated (a signature will not be read): mark it @takes_plan (from aioloader import "
        "takes_plan) to keep getting the plan, or give it one parameter",
        "aioloader: the transform test_the_two_parameter_form_still_works_and_warns_once_naming"
        "_the_fix.<locals>.old_transform gets the rng because of its signature, which is "
        "deprecated (a signature will not be read): mark it @takes_rng (from aioloader import "
        "takes_rng) to keep getting the rng, or give it one parameter",
    ]
    assert {w.filename for w in caught} == {__file__}  # points at the DataLoader(...) line
    assert list(first.iter_sync(0, 2)) == [0, 1]


def image(i: int) -> ImageSample:
    return ImageSample(np.full((1, 2, 3 + i), i, dtype=np.float32), np.array([i], np.int32), i)


@pytest.mark.parametrize(
    ("dataset", "collator"),
    [
        (SAMPLES, StackCollator()),
        (SAMPLES, TreeCollator()),
        (SAMPLES, PadCollator()),
        ([image(i) for i in range(8)], ImageBatchCollator()),
    ],
    ids=["StackCollator", "TreeCollator", "PadCollator", "ImageBatchCollator"],
)
def test_the_built_in_collators_are_marked_and_silent(dataset: Any, collator: Any) -> None:
    assert wants_plan(collator) is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sampler = SequentialSampler(8, 2)
        for batch in DataLoader(MemoryDataset(dataset), sampler, collator, seed=0).iter_sync(0, 2):
            getattr(batch, "release", lambda: None)()


def test_the_built_in_transform_is_marked() -> None:
    from aioloader import JpegCropResize

    assert wants_rng(JpegCropResize(size=8)) is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert transform_takes_rng(JpegCropResize(size=8)) is True
