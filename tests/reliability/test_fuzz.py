"""Bad input, fuzzed: public constructors and calls raise clear errors, never crash or lie.

Each fuzzed call breaks one argument it knows (the others are valid), and either succeeds
or raises ValueError / TypeError (or an aioloader error) whose message states a rule
("must" or "cannot") and names that argument.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
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
SHORT_INTEGERS = st.one_of(st.integers(-3, 100), st.floats(), st.text(max_size=2), st.none())
LENGTHS = st.one_of(  # lengths to pack: no huge values (valid ones would take hours)
    st.none(),
    st.booleans(),
    st.text(max_size=4),
    st.integers(-3, 100),
    st.lists(SHORT_INTEGERS, max_size=20),
    st.lists(st.lists(SHORT_INTEGERS, max_size=3), max_size=4),
    hnp.arrays(
        st.sampled_from([np.int64, np.int32, np.uint8, np.float32, np.bool_]),
        hnp.array_shapes(min_dims=0, max_dims=3, max_side=5),
        elements=st.integers(0, 1),
    ),
)
CONTEXTS = st.one_of(  # context lengths: no huge valid ones (a row of 2**40 tokens is 8 TiB)
    st.none(),
    st.booleans(),
    st.text(max_size=4),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 0),
    st.integers(1, 4096),
    st.lists(NUMBERS, max_size=3),
    hnp.arrays(  # a 0-d array may pass for an integer: a small one
        st.sampled_from([np.float32, np.float64, np.int64, np.int32, np.uint8]),
        hnp.array_shapes(min_dims=0, max_dims=2, max_side=3),
        elements=st.integers(0, 100),
    ),
)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


def names_the_argument(message: str, name: str) -> bool:
    """The message states a rule ("must" or "cannot") and names ``name`` as a word."""
    rule = re.search(r"\b(must|cannot)\b", message)
    return rule is not None and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", message) is not None


def expect_clear(call: Callable[[], Any], name: str) -> Any:
    """Run ``call``, which broke argument ``name``; a failure must name it before its rule."""
    try:
        return call()
    except (ValueError, TypeError, al.AioloaderError) as caught:
        error: BaseException = caught
    message = str(error)
    assert message, f"{type(error).__name__} without a message"
    if not isinstance(error, al.CollateError):  # CollateError keeps torch's messages
        assert names_the_argument(message, name), f"{name!r} is not named in: {message}"
    return None


def break_one(call: Callable[..., Any], valid: Mapping[str, Any], name: str, value: Any) -> Any:
    """``call(**valid)`` with ``name`` set to ``value``, checked by ``expect_clear``."""
    arguments = {**valid, name: value}
    return expect_clear(lambda: call(**arguments), name)


def one_of(valid: Mapping[str, Any], values: Any = None, **per_name: Any) -> Any:
    """Which argument to break, and its fuzzed value (from ``per_name[name]`` if given)."""
    default = ANYTHING if values is None else values
    return st.one_of(
        *(st.tuples(st.just(name), per_name.get(name, default)) for name in sorted(valid))
    )


def exercise_sampler(sampler: Any) -> None:
    steps = sampler.steps_per_epoch
    assert isinstance(steps, int)
    assert steps >= 0
    if steps:
        for step in {0, steps - 1}:
            indices = sampler.indices(3, 1, step)
            assert indices.dtype == np.int64
            assert indices.ndim == 1


def test_the_oracle_wants_the_argument_and_a_rule() -> None:
    assert names_the_argument("batch_size must be >= 1 but got 0", "batch_size")
    assert names_the_argument("sizes[2] must be an integer", "sizes")
    assert names_the_argument("samples[0].label must fit int32", "label")
    assert names_the_argument("rank must be in [0, world_size) but got 3", "world_size")
    assert not names_the_argument("max_batch_size must be >= 1 but got 0", "batch_size")
    assert not names_the_argument("could not convert string to float: 'x'", "padding_value")
    assert not names_the_argument("padding_value is not a number", "padding_value")


POSITIONAL = {"n": 10, "batch_size": 3, "drop_last": True}


@FUZZ
@given(one_of(POSITIONAL, SMALL))
def test_positional_samplers(broken: tuple[str, Any]) -> None:
    for kind in (al.SequentialSampler, al.ShuffledSampler):
        sampler = break_one(kind, POSITIONAL, *broken)
        if sampler is not None:
            exercise_sampler(sampler)
            assert int(sampler.indices(0, 0, 0).min()) >= 0 if sampler.steps_per_epoch else True


MIXING = {"sizes": [4, 6], "shares": [0.5, 1.0], "batch_size": 3, "steps_per_epoch": None}


@FUZZ
@given(
    one_of(
        MIXING,
        st.one_of(SMALL, st.lists(st.integers(0, 50), max_size=4), st.lists(NUMBERS, max_size=4)),
    )
)
def test_mixing_sampler(broken: tuple[str, Any]) -> None:
    sampler = break_one(al.MixingSampler, MIXING, *broken)
    if sampler is not None:
        exercise_sampler(sampler)


BUCKETED = {"lengths": [3, 1, 4, 1, 5, 9], "batch_size": 2, "pool_batches": 2, "drop_last": True}


@FUZZ
@given(one_of(BUCKETED, st.one_of(SMALL, st.lists(st.integers(-3, 2**33), max_size=30))))
def test_bucketed_sampler(broken: tuple[str, Any]) -> None:
    sampler = break_one(al.BucketedSampler, BUCKETED, *broken)
    if sampler is not None:
        exercise_sampler(sampler)


BLOCK = {"shard_sizes": [3, 0, 5], "batch_size": 2, "window": 2, "drop_last": True}


@FUZZ
@given(one_of(BLOCK, st.one_of(SMALL, st.lists(st.integers(-3, 2**33), max_size=6))))
def test_block_shuffled_sampler(broken: tuple[str, Any]) -> None:
    sampler = break_one(al.BlockShuffledSampler, BLOCK, *broken)
    if sampler is not None:
        exercise_sampler(sampler)


DISTRIBUTED = {
    "n": 10,
    "batch_size": 2,
    "rank": 1,
    "world_size": 3,
    "shuffle": True,
    "drop_last": False,
    "drop_last_batch": False,
}


@FUZZ
@given(one_of(DISTRIBUTED, SMALL))
def test_distributed_sampler(broken: tuple[str, Any]) -> None:
    sampler = break_one(al.DistributedSampler, DISTRIBUTED, *broken)
    if sampler is not None:
        exercise_sampler(sampler)


RANK_SLICE = {"sampler": al.SequentialSampler(12, 4), "rank": 1, "world_size": 2}


@FUZZ
@given(one_of(RANK_SLICE, SMALL))
def test_rank_slice(broken: tuple[str, Any]) -> None:
    sampler = break_one(al.RankSlice, RANK_SLICE, *broken)
    if sampler is not None:
        exercise_sampler(sampler)


PACKED = {
    "lengths": [5, 1, 9, 3],
    "context_length": 8,
    "rows_per_batch": 2,
    "overflow": "split",
    "drop_last": False,
}


@FUZZ
@given(one_of(PACKED, SMALL, lengths=LENGTHS, context_length=CONTEXTS))
def test_packed_sampler(broken: tuple[str, Any]) -> None:
    sampler = break_one(al.PackedSampler, PACKED, *broken)
    if sampler is not None:
        exercise_sampler(sampler)


RNG = {"seed": 1, "epoch": 2, "step": 3, "slot": 4, "stream": 5}


@FUZZ
@given(one_of(RNG), ANYTHING, ANYTHING)
def test_rng_functions(broken: tuple[str, Any], x: Any, n: Any) -> None:
    break_one(core.derive, RNG, *broken)
    break_one(core.mix, {"x": 1}, "x", x)
    for name, value in (("p", x), ("n", n), ("key", x)):
        break_one(core.keyed_permutation, {"p": 1, "n": 5, "key": 7}, name, value)
    rng = break_one(al.SampleRng, {"state": 1}, "state", x)
    break_one(al.SampleRng(1).next_int, {"n": 5}, "n", n)
    if rng is not None:
        assert 0 <= rng.next_int(5) < 5


def _plan(size: int) -> BatchPlan:
    return BatchPlan(0, 0, 0, 0, np.arange(size, dtype=np.int64))


IMAGE_COLLATOR = {"width_multiple": 4, "pad_value": 0.0, "augment": None, "pool": None}
IMAGE_SAMPLE: dict[str, Any] = {
    "image": np.zeros((1, 2, 3), np.float32),
    "target": (1, 2),
    "label": 3,
}


@FUZZ
@given(one_of(IMAGE_COLLATOR, SMALL), one_of(IMAGE_SAMPLE))
def test_image_collator(collator_arg: tuple[str, Any], sample_arg: tuple[str, Any]) -> None:
    """A bad sample field is named by the collator that reads it (``samples[0].label``)."""
    collator = break_one(al.ImageBatchCollator, IMAGE_COLLATOR, *collator_arg)
    if collator is None:
        return
    sample = al.ImageSample(**{**IMAGE_SAMPLE, sample_arg[0]: sample_arg[1]})
    good = al.ImageSample(**IMAGE_SAMPLE)
    batch = expect_clear(lambda: collator([sample, good], _plan(2)), sample_arg[0])
    if batch is not None:
        with batch:
            assert batch.images.dtype == np.float32
            for slot, each in enumerate((sample, good)):
                width = int(batch.widths[slot])
                image = batch.images[slot, :, :, :width]
                assert np.array_equal(image, each.image, equal_nan=True)


@FUZZ
@given(st.lists(st.one_of(ARRAYS, ANYTHING), min_size=1, max_size=4))
def test_image_collator_samples(samples: list[Any]) -> None:
    """Anything that is not an ImageSample is named by its slot in ``samples``."""
    expect_clear(lambda: al.ImageBatchCollator()(samples, _plan(len(samples))), "samples")


PAD = {"seqs": [[1, 2, 3], [4]], "padding_value": 0, "padding_side": "right"}


@FUZZ
@given(one_of(PAD, st.one_of(ANYTHING, st.lists(st.one_of(ARRAYS, ANYTHING), max_size=4))))
def test_pad_sequences(broken: tuple[str, Any]) -> None:
    break_one(core.pad_sequences, PAD, *broken)


PAD_COLLATOR = {"padding_value": 0, "padding_side": "left", "pool": None}


@FUZZ
@given(one_of(PAD_COLLATOR))
def test_pad_collator(broken: tuple[str, Any]) -> None:
    collator = break_one(al.PadCollator, PAD_COLLATOR, *broken)
    if collator is not None:  # a padding value too large for int64 is named when it is cast
        batch = expect_clear(lambda: collator([[1, 2], [3]], _plan(2)), broken[0])
        if batch is not None:
            with batch:
                assert batch.lengths.tolist() == [2, 1]


PACKING = {"lengths": [5, 23, 9], "context_length": 32, "overflow": "split"}


@FUZZ
@given(one_of(PACKING, SMALL, lengths=LENGTHS, context_length=CONTEXTS))
def test_packing(broken: tuple[str, Any]) -> None:
    packing = break_one(core.pack_lengths, PACKING, *broken)
    if packing is not None:
        assert packing.num_rows >= 0


PACK_SEQUENCES = {
    "seqs_or_lengths": [[1, 2], [3, 4, 5]],
    "context_length": 4,
    "overflow": "split",
    "causal_mask": False,
    "padding_value": 0,
}


@FUZZ
@given(one_of(PACK_SEQUENCES, SMALL, seqs_or_lengths=LENGTHS, context_length=CONTEXTS))
def test_pack_sequences(broken: tuple[str, Any]) -> None:
    break_one(core.pack_sequences, PACK_SEQUENCES, *broken)


PACK_COLLATOR = {
    "context_length": 8,
    "sampler": None,
    "overflow": "split",
    "padding_value": 0,
    "causal_mask": False,
    "pool": None,
}


@FUZZ
@given(one_of(PACK_COLLATOR, SMALL, context_length=CONTEXTS))
def test_pack_collator(broken: tuple[str, Any]) -> None:
    collator = break_one(al.PackCollator, PACK_COLLATOR, *broken)
    if collator is not None and collator_has_no_sampler(broken):
        batch = expect_clear(lambda: collator([[1, 2], [3]], _plan(2)), broken[0])
        if batch is not None:
            with batch:
                context = {**PACK_COLLATOR, broken[0]: broken[1]}["context_length"]
                assert batch.tokens.shape[1] == context


def collator_has_no_sampler(broken: tuple[str, Any]) -> bool:
    return broken[0] != "sampler" or broken[1] is None


@FUZZ
@given(st.lists(ANYTHING, min_size=0, max_size=4))
def test_default_collate(samples: list[Any]) -> None:
    expect_clear(lambda: al.default_collate(samples), "batch")


LOADER = {"seed": 0, "workers": 0, "prefetch": 2, "max_inflight_reads": 4}


@FUZZ
@given(one_of(LOADER))
def test_loader_constructor(broken: tuple[str, Any]) -> None:
    def build(**options: Any) -> Any:
        return al.DataLoader(
            al.testing.MemoryDataset([np.zeros(2)] * 8),
            al.SequentialSampler(8, 2),
            al.testing.StackCollator(),
            **options,
        )

    break_one(build, LOADER, *broken)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: al.PadCollator(padding_value="x"),
            r"^padding_value must be a number but got str \('x'\)$",
        ),
        (
            lambda: al.PadCollator(pool="x"),  # type: ignore[arg-type]
            r"^pool must be a BufferPool or None but got str \('x'\)$",
        ),
        (
            lambda: al.PackCollator(8, sampler="x"),  # type: ignore[arg-type]
            r"^sampler must be a PackedSampler or None but got str \('x'\)$",
        ),
        (
            lambda: al.PackCollator(8, pool="x"),  # type: ignore[arg-type]
            r"^pool must be a BufferPool or None but got str \('x'\)$",
        ),
        (
            lambda: al.PackCollator(8, padding_value=[1]),
            r"^padding_value must be a number but got list \(\[1\]\)$",
        ),
    ],
)
def test_the_collators_name_a_bad_argument_and_its_value(
    call: Callable[[], Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        call()


@pytest.mark.parametrize(
    ("shards", "message"),
    [
        (
            "one.tar",
            r"^shards must be a sequence of paths or keys but got a single one \('one.tar'\)",
        ),
        (Path("one.tar"), r"^shards must be .* but got a single one \(PosixPath\('one.tar'\)\)"),
        ([3], r"^shards\[0\] must be a non-empty str or path but got 3$"),
        (["a.tar", ""], r"^shards\[1\] must be a non-empty str or path but got ''$"),
    ],
)
def test_tar_shards_name_a_bad_shards_argument_and_its_value(shards: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        al.TarShards(shards)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_gain_offset_rejects_non_finite(bad: float) -> None:
    with pytest.raises(ValueError, match="must be finite"):
        al.GainOffset(bad, 0.1)
