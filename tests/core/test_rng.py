"""aioloader.core._rng against the reference vectors, and scalar/array agreement."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioloader.core import BatchRng, SampleRng, derive, derive_slots, mix, mix_array
from aioloader.core._rng import GOLDEN, sample_rngs, slot_prefix

U64 = st.integers(0, 2**64 - 1)


def _f32_bits(value: Any) -> int:
    return int(np.asarray(value, dtype=np.float32).view(np.uint32))


def _f64_bits(value: float) -> int:
    return int(np.asarray(value, dtype=np.float64).view(np.uint64))


def test_mix_vectors(public_vectors: dict[str, Any]) -> None:
    cases = public_vectors["rng"]["mix"]
    assert len(cases) == 20
    for case in cases:
        assert mix(int(case["x"])) == int(case["out"])
    inputs = np.array([int(c["x"]) for c in cases], dtype=np.uint64)
    assert mix_array(inputs).tolist() == [int(c["out"]) for c in cases]


def test_splitmix_vectors(public_vectors: dict[str, Any]) -> None:
    for case in public_vectors["rng"]["splitmix"]:
        rng = SampleRng(int(case["seed"]))
        assert [rng.next_u64() for _ in range(16)] == [int(v) for v in case["u64"]]


def test_standard_splitmix_from_zero() -> None:
    assert SampleRng(0).next_u64() == 0xE220A8397B1DCDAF


@pytest.mark.parametrize(
    ("kind", "draw", "bits"),
    [
        ("single", "next_single", _f32_bits),
        ("double", "next_double", _f64_bits),
        ("normal", "next_normal", _f32_bits),
    ],
)
def test_float_vectors(public_vectors: dict[str, Any], kind: str, draw: str, bits: Any) -> None:
    for case in public_vectors["rng"][kind]:
        rng = SampleRng(int(case["seed"]))
        assert [bits(getattr(rng, draw)()) for _ in range(16)] == [
            int(v, 16) for v in case["values"]
        ]
        lanes = BatchRng(np.array([int(case["seed"])] * 3, dtype=np.uint64))
        for expected in case["values"]:
            assert [bits(v) for v in getattr(lanes, draw)()] == [int(expected, 16)] * 3


def test_next_int_vectors(public_vectors: dict[str, Any]) -> None:
    cases = public_vectors["rng"]["next_int"]
    assert len(cases) == 46
    for case in cases:
        seed, n = int(case["seed"]), int(case["n"])
        rng = SampleRng(seed)
        assert [rng.next_int(n) for _ in range(16)] == [int(v) for v in case["values"]], case[
            "note"
        ]
        consumed = (rng.state - seed) * pow(GOLDEN, -1, 2**64) % 2**64
        assert consumed == case["draws_consumed"], case["note"]
        assert ((2**64 - n) % n) == int(case["t"])


def test_derive_vectors(public_vectors: dict[str, Any]) -> None:
    for case in public_vectors["rng"]["derive"]:
        args = [int(case[k]) for k in ("seed", "epoch", "step", "slot", "stream")]
        assert derive(*args) == int(case["out"])
        seed, epoch, step, slot, stream = args
        slots = np.array([slot, slot], dtype=np.uint64)
        assert derive_slots(seed, epoch, step, slots, stream).tolist() == [int(case["out"])] * 2


@given(st.lists(U64, min_size=1, max_size=40))
def test_mix_array_equals_scalar(values: list[int]) -> None:
    assert mix_array(np.array(values, dtype=np.uint64)).tolist() == [mix(v) for v in values]


@given(U64, U64, U64, st.integers(0, 300), U64)
def test_derive_slots_equals_scalar(
    seed: int, epoch: int, step: int, count: int, stream: int
) -> None:
    expected = [derive(seed, epoch, step, slot, stream) for slot in range(count)]
    assert derive_slots(seed, epoch, step, count, stream).tolist() == expected


@given(st.lists(U64, min_size=1, max_size=8), st.integers(1, 5))
def test_batch_rng_lanes_equal_sample_rng(states: list[int], draws: int) -> None:
    lanes = BatchRng(np.array(states, dtype=np.uint64))
    scalars = [SampleRng(s) for s in states]
    for _ in range(draws):
        assert lanes.next_u64().tolist() == [r.next_u64() for r in scalars]
        assert [_f32_bits(v) for v in lanes.next_normal()] == [
            _f32_bits(r.next_normal()) for r in scalars
        ]


@given(U64, st.integers(1, 2**64 - 1))
def test_next_int_in_range(seed: int, n: int) -> None:
    assert 0 <= SampleRng(seed).next_int(n) < n


@pytest.mark.parametrize(
    ("args", "error", "fragment"),
    [
        ((-1, 0, 0, 0, 0), ValueError, "seed must be an integer in [0, 2^64) but got -1"),
        (
            (2**64, 0, 0, 0, 0),
            ValueError,
            "seed must be an integer in [0, 2^64) but got 18446744073709551616",
        ),
        ((0, -3, 0, 0, 0), ValueError, "epoch must be an integer in [0, 2^64) but got -3"),
        ((0, 0, 1.5, 0, 0), TypeError, "step must be an integer but got float (1.5)"),
        ((0, 0, 0, "1", 0), TypeError, "slot must be an integer but got str ('1')"),
        ((0, 0, 0, 0, True), TypeError, "stream must be an integer but got a bool (True)"),
    ],
)
def test_derive_rejects_bad_arguments(args: tuple[Any, ...], error: type, fragment: str) -> None:
    with pytest.raises(error) as info:
        derive(*args)
    assert str(info.value) == fragment


@pytest.mark.parametrize(
    ("n", "message"),
    [
        (0, "n must be an integer in [1, 2^64) but got 0"),
        (2**64, "n must be an integer in [1, 2^64) but got 18446744073709551616"),
        (-5, "n must be an integer in [1, 2^64) but got -5"),
    ],
)
def test_next_int_rejects_bad_bound(n: int, message: str) -> None:
    with pytest.raises(ValueError, match=r"^n must") as info:
        SampleRng(1).next_int(n)
    assert str(info.value) == message


def test_mix_and_rng_reject_out_of_range_state() -> None:
    with pytest.raises(ValueError, match=r"x must be an integer in \[0, 2\^64\) but got -1"):
        mix(-1)
    with pytest.raises(ValueError, match=r"state must be an integer in \[0, 2\^64\)"):
        SampleRng(2**64)


def test_numpy_integers_are_accepted() -> None:
    assert derive(np.uint64(5), np.int64(1), 2, 3, 4) == derive(5, 1, 2, 3, 4)


def test_sample_rngs_draw_what_sample_rng_draws() -> None:
    keys = [*derive_slots(2**64 - 1, 3, 9, 128, 0).tolist(), 0, 2**64 - 1]
    made = sample_rngs(keys)
    assert [type(rng) for rng in made] == [SampleRng] * len(keys)
    assert [rng.state for rng in made] == keys
    reference = [SampleRng(key) for key in keys]
    assert [(r.next_u64(), r.next_int(1000)) for r in made] == [
        (r.next_u64(), r.next_int(1000)) for r in reference
    ]
    assert sample_rngs([]) == []


def test_slot_prefix_is_the_step_part_of_derive() -> None:
    prefix = slot_prefix(7, 2**64 - 1, 3)
    for slot, stream in ((0, 0), (5, 1), (2**64 - 1, 2**64 - 1)):
        expected = mix((mix((prefix + slot) % 2**64) + stream) % 2**64)
        assert derive(7, 2**64 - 1, 3, slot, stream) == expected
