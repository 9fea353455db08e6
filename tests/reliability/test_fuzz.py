"""Bad input, fuzzed: public constructors and calls raise clear errors, never crash or lie.

Every call either succeeds or raises ValueError / TypeError (or an aioloader error) whose
message says what was expected ("must") and what was seen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import aioloader as al
import aioloader.testing
from aioloader import core
from aioloader.core import BatchPlan

NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 2**63, 2**64, 2**32, float("nan"), float("inf")]),
)
ARRAYS = hnp.arrays(
    st.sampled_from([np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_, np.uint64]),
    hnp.array_shapes(min_dims=0, max_dims=4, max_side=5),
)
ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    NUMBERS,
    st.text(max_size=4),
    st.binary(max_size=4),
    st.lists(NUMBERS, max_size=5),
    st.tuples(NUMBERS, NUMBERS),
    ARRAYS,
    st.dictionaries(st.text(max_size=2), NUMBERS, max_size=2),
)
SMALL = st.one_of(ANYTHING, st.integers(1, 40))

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


def expect_clear(call: Callable[[], Any]) -> Any:
    """Run ``call``; a failure must be a ValueError/TypeError saying what was expected."""
    try:
        return call()
    except (ValueError, TypeError, al.AioloaderError) as caught:
        error: BaseException = caught
    message = str(error)
    assert message, f"{type(error).__name__} without a message"
    if not isinstance(error, al.CollateError):  # CollateError keeps torch's messages
        assert "must" in message or "cannot" in message or "fewer items" in message, message
    return None


def exercise_sampler(sampler: Any) -> None:
    steps = sampler.steps_per_epoch
    assert isinstance(steps, int)
    assert steps >= 0
    if steps:
        for step in {0, steps - 1}:
            indices = sampler.indices(3, 1, step)
            assert indices.dtype == np.int64
            assert indices.ndim == 1


@FUZZ
@given(SMALL, SMALL, ANYTHING)
def test_positional_samplers(n: Any, batch: Any, drop_last: Any) -> None:
    for kind in (al.SequentialSampler, al.ShuffledSampler):
        sampler = expect_clear(lambda kind=kind: kind(n, batch, drop_last))  # type: ignore[misc]
        if sampler is not None:
            exercise_sampler(sampler)
            assert int(sampler.indices(0, 0, 0).min()) >= 0 if sampler.steps_per_epoch else True


@FUZZ
@given(
    st.one_of(ANYTHING, st.lists(st.integers(0, 50), max_size=4)),
    st.one_of(ANYTHING, st.lists(NUMBERS, max_size=4)),
    SMALL,
    st.one_of(st.none(), SMALL),
)
def test_mixing_sampler(sizes: Any, shares: Any, batch: Any, steps: Any) -> None:
    sampler = expect_clear(lambda: al.MixingSampler(sizes, shares, batch, steps))
    if sampler is not None:
        exercise_sampler(sampler)


@FUZZ
@given(st.one_of(ANYTHING, st.lists(st.integers(-3, 2**33), max_size=30)), SMALL, SMALL)
def test_bucketed_sampler(lengths: Any, batch: Any, pool: Any) -> None:
    sampler = expect_clear(lambda: al.BucketedSampler(lengths, batch, pool))
    if sampler is not None:
        exercise_sampler(sampler)


@FUZZ
@given(ANYTHING, ANYTHING, ANYTHING, ANYTHING, ANYTHING)
def test_rng_functions(a: Any, b: Any, c: Any, d: Any, e: Any) -> None:
    expect_clear(lambda: core.derive(a, b, c, d, e))
    expect_clear(lambda: core.mix(a))
    expect_clear(lambda: core.keyed_permutation(a, b, c))
    rng = expect_clear(lambda: al.SampleRng(a))
    if rng is not None:
        expect_clear(lambda: rng.next_int(b))


def _plan(size: int) -> BatchPlan:
    return BatchPlan(0, 0, 0, 0, np.arange(size, dtype=np.int64))


@FUZZ
@given(st.lists(st.tuples(ANYTHING, ANYTHING, ANYTHING), min_size=1, max_size=3), SMALL, ANYTHING)
def test_image_collator(samples: list[tuple[Any, Any, Any]], multiple: Any, pad: Any) -> None:
    collator = expect_clear(lambda: al.ImageBatchCollator(multiple, pad))
    built = [expect_clear(lambda s=s: al.ImageSample(*s)) for s in samples]  # type: ignore[misc]
    if collator is None or any(sample is None for sample in built):
        return
    batch = expect_clear(lambda: collator(built, _plan(len(built))))
    if batch is not None:
        with batch:
            assert batch.images.dtype == np.float32
            assert batch.images.shape[0] == len(built)
            for slot, sample in enumerate(built):
                width = int(batch.widths[slot])
                assert np.array_equal(
                    batch.images[slot, :, :, :width], sample.image, equal_nan=True
                )


@FUZZ
@given(st.lists(st.one_of(ARRAYS, ANYTHING), min_size=1, max_size=4), ANYTHING, ANYTHING)
def test_pad_sequences(seqs: list[Any], value: Any, side: Any) -> None:
    expect_clear(lambda: core.pad_sequences(seqs, value, side))


@FUZZ
@given(st.one_of(ANYTHING, st.lists(st.integers(-2, 70), max_size=20)), SMALL, ANYTHING)
def test_packing(lengths: Any, context: Any, overflow: Any) -> None:
    packing = expect_clear(lambda: core.pack_lengths(lengths, context, overflow))
    if packing is not None:
        assert packing.num_rows >= 0


@FUZZ
@given(st.lists(ANYTHING, min_size=0, max_size=4))
def test_default_collate(samples: list[Any]) -> None:
    expect_clear(lambda: al.default_collate(samples))


@FUZZ
@given(ANYTHING, ANYTHING, ANYTHING, ANYTHING)
def test_loader_constructor(seed: Any, workers: Any, prefetch: Any, reads: Any) -> None:
    expect_clear(
        lambda: al.DataLoader(
            al.testing.MemoryDataset([np.zeros(2)] * 8),
            al.SequentialSampler(8, 2),
            al.testing.StackCollator(),
            seed=seed,
            workers=workers,
            prefetch=prefetch,
            max_inflight_reads=reads,
        )
    )


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_gain_offset_rejects_non_finite(bad: float) -> None:
    with pytest.raises(ValueError, match="must be finite"):
        al.GainOffset(bad, 0.1)
