"""aioloader.core._permutation: reference vectors, bijection, scalar/array agreement."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioloader.core import keyed_permutation, keyed_permutation_array


def test_full_permutation_vectors(public_vectors: dict[str, Any]) -> None:
    full = [c for c in public_vectors["perm"] if c["kind"] == "full"]
    assert len(full) == 28
    for case in full:
        n, key = int(case["n"]), int(case["key"])
        assert [keyed_permutation(p, n, key) for p in range(n)] == case["perm"]
        assert keyed_permutation_array(np.arange(n), n, key).tolist() == case["perm"]


def test_pair_vectors(public_vectors: dict[str, Any]) -> None:
    pairs = [c for c in public_vectors["perm"] if c["kind"] == "pairs"]
    assert len(pairs) == 7
    for case in pairs:
        n, key = int(case["n"]), int(case["key"])
        positions = [int(p) for p, _ in case["pairs"]]
        expected = [int(q) for _, q in case["pairs"]]
        assert [keyed_permutation(p, n, key) for p in positions] == expected
        lanes = np.array(positions, dtype=np.uint64)
        assert keyed_permutation_array(lanes, n, key).tolist() == expected


@settings(max_examples=60)
@given(st.integers(1, 3000), st.integers(0, 2**64 - 1))
def test_is_a_bijection(n: int, key: int) -> None:
    image = keyed_permutation_array(np.arange(n), n, key)
    assert np.array_equal(np.sort(image), np.arange(n, dtype=np.uint64))


@given(st.integers(1, 2**64 - 1), st.integers(0, 2**64 - 1), st.data())
def test_array_form_equals_scalar(n: int, key: int, data: st.DataObject) -> None:
    positions = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20))
    lanes = np.array(positions, dtype=np.uint64)
    assert keyed_permutation_array(lanes, n, key).tolist() == [
        keyed_permutation(p, n, key) for p in positions
    ]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 9, 16, 17, 1024, 1025, 2**16 + 1])
def test_edge_sizes_are_permutations(n: int) -> None:
    image = [keyed_permutation(p, n, 99) for p in range(n)]
    assert sorted(image) == list(range(n))


def test_n_one_gives_zero() -> None:
    assert keyed_permutation(0, 1, 12345) == 0
    assert keyed_permutation_array(np.zeros(3, dtype=np.int64), 1, 7).tolist() == [0, 0, 0]


def test_preserves_shape() -> None:
    grid = np.arange(12).reshape(3, 4)
    out = keyed_permutation_array(grid, 12, 5)
    assert out.shape == (3, 4)
    assert out.ravel().tolist() == [keyed_permutation(p, 12, 5) for p in range(12)]


@pytest.mark.parametrize(
    ("p", "n", "key", "error", "message"),
    [
        (0, 0, 0, ValueError, "p must be an integer in [0, n) = [0, 0) but got 0"),
        (1, 1, 0, ValueError, "p must be an integer in [0, n) = [0, 1) but got 1"),
        (-1, 5, 0, ValueError, "p must be an integer in [0, n) = [0, 5) but got -1"),
        (0, -1, 0, ValueError, "n must be an integer in [0, 2^64) but got -1"),
        (0, 5, -1, ValueError, "key must be an integer in [0, 2^64) but got -1"),
        (0.0, 5, 0, TypeError, "p must be an integer but got float (0.0)"),
    ],
)
def test_rejects_bad_arguments(p: Any, n: Any, key: Any, error: type, message: str) -> None:
    with pytest.raises(error) as info:
        keyed_permutation(p, n, key)
    assert str(info.value) == message


def test_array_form_rejects_out_of_range_and_floats() -> None:
    with pytest.raises(ValueError, match=r"positions must be in \[0, n\) = \[0, 4\) but got 4"):
        keyed_permutation_array(np.arange(5), 4, 0)
    with pytest.raises(TypeError, match="positions must hold integers but got dtype float64"):
        keyed_permutation_array(np.zeros(2), 4, 0)
