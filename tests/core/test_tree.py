"""default_collate in numpy against torch.utils.data.default_collate; TreeCollator."""

from __future__ import annotations

import collections
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from torch.utils.data import default_collate as torch_collate

from aioloader.core._plan import BatchPlan
from aioloader.core._tree import EQUAL_SIZE_ERROR, TreeBatch, TreeCollator, default_collate

NAMED = {k: collections.namedtuple(f"Named{k}", [f"f{i}" for i in range(k)]) for k in (1, 2, 3)}
DTYPES = [np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_, np.int16, np.float16]


def assert_same(ours: Any, theirs: Any, where: str = "batch") -> None:
    """Same structure and container types; numpy arrays where torch has tensors, same bits."""
    if isinstance(theirs, torch.Tensor):
        expected = theirs.numpy()
        assert isinstance(ours, np.ndarray), where
        assert (ours.dtype, ours.shape) == (expected.dtype, expected.shape), where
        assert ours.tobytes() == expected.tobytes(), where
        return
    assert type(ours) is type(theirs), where
    if isinstance(theirs, Mapping):
        assert list(ours) == list(theirs), where
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), where
        for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert_same(a, b, f"{where}[{k}]")
    else:
        assert ours == theirs, where


leaf_schemas = st.one_of(
    st.sampled_from(["int", "float", "bool", "str", "bytes"]),
    st.tuples(
        st.just("array"),
        st.sampled_from(DTYPES),
        hnp.array_shapes(min_dims=0, max_dims=3, max_side=3),
    ),
    st.tuples(st.just("scalar"), st.sampled_from(DTYPES)),
)
schemas = st.recursive(
    leaf_schemas,
    lambda inner: st.one_of(
        st.tuples(
            st.just("dict"),
            st.dictionaries(st.text("abcxyz", min_size=1, max_size=3), inner, max_size=3),
        ),
        st.tuples(st.sampled_from(["list", "tuple"]), st.lists(inner, max_size=3)),
        st.tuples(st.just("named"), st.lists(inner, min_size=1, max_size=3)),
    ),
    max_leaves=8,
)


def values(schema: Any) -> st.SearchStrategy[Any]:
    if schema == "int":
        return st.integers(-(2**62), 2**62)
    if schema == "float":
        return st.floats(allow_nan=False, width=64)
    if schema == "bool":
        return st.booleans()
    if schema == "str":
        return st.text(max_size=3)
    if schema == "bytes":
        return st.binary(max_size=3)
    kind = schema[0]
    if kind == "array":
        return hnp.arrays(
            schema[1], schema[2], elements=hnp.from_dtype(np.dtype(schema[1]), allow_nan=False)
        )
    if kind == "scalar":
        return hnp.from_dtype(np.dtype(schema[1]), allow_nan=False).map(np.dtype(schema[1]).type)
    if kind == "dict":
        keys = list(schema[1])
        return st.tuples(*(values(schema[1][k]) for k in keys)).map(
            lambda vs: dict(zip(keys, vs, strict=True))
        )
    parts = st.tuples(*(values(s) for s in schema[1]))
    if kind == "list":
        return parts.map(list)
    if kind == "tuple":
        return parts
    named = NAMED[len(schema[1])]
    return parts.map(lambda vs: named(*vs))


@st.composite
def batches(draw: st.DrawFn) -> list[Any]:
    schema = draw(schemas)
    return draw(st.lists(values(schema), min_size=1, max_size=4))


@settings(max_examples=200, deadline=None)
@given(batch=batches())
def test_equals_torch_default_collate(batch: list[Any]) -> None:
    assert_same(default_collate(batch), torch_collate(batch))


def test_python_numbers_map_to_torch_dtypes() -> None:
    assert default_collate([1.5, 2]).dtype == np.float64
    assert default_collate([1, 2]).dtype == np.int64
    assert default_collate([True, False]).dtype == np.bool_
    assert default_collate([True, 2]).dtype == np.int64
    assert default_collate([1, 2.5]).dtype == np.float32  # as torch.tensor infers
    for batch in (
        [1, 2.5],
        [True, 2],
        [np.float32(1), np.float64(2)],
        [np.array(1.0), np.array(2.0)],
    ):
        assert_same(default_collate(batch), torch_collate(batch))


def test_containers_keep_their_types() -> None:
    class Point(NamedTuple):
        x: float
        y: int

    ordered = [collections.OrderedDict(b=1, a=2.0), collections.OrderedDict(b=3, a=4.0)]
    for batch in (
        ordered,
        [collections.defaultdict(int, k=1), collections.defaultdict(int, k=2)],
        [Point(1.0, 2), Point(3.0, 4)],
        [(1, "a"), (2, "b")],
        [[1, (2.0, "x")], [3, (4.0, "y")]],
        [{"s": "p", "b": b"q"}, {"s": "r", "b": b"t"}],
    ):
        assert_same(default_collate(batch), torch_collate(batch))


class _Frozen(Mapping[str, Any]):
    def __init__(self, data: dict[str, Any]) -> None:
        self._data = dict(data)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


class _NoCopy(_Frozen):
    """Built from keywords only, so ``_NoCopy(a_dict)`` is a TypeError."""

    def __init__(self, **data: Any) -> None:
        super().__init__(data)


def test_immutable_mappings_are_rebuilt_or_become_dicts() -> None:
    rebuilt = default_collate([_Frozen({"a": 1}), _Frozen({"a": 2})])
    assert type(rebuilt) is _Frozen
    assert rebuilt["a"].tolist() == [1, 2]
    plain = default_collate([_NoCopy(a=1), _NoCopy(a=2)])  # _NoCopy(dict) is a TypeError
    assert type(plain) is dict
    assert plain["a"].tolist() == [1, 2]
    assert type(torch_collate([_NoCopy(a=1), _NoCopy(a=2)])) is dict


def test_uneven_lists_raise_the_torch_error() -> None:
    batch = [{"ids": [1, 2]}, {"ids": [3]}]
    with pytest.raises(RuntimeError) as theirs:
        torch_collate(batch)
    with pytest.raises(RuntimeError) as ours:
        default_collate(batch)
    assert str(ours.value) == str(theirs.value) == EQUAL_SIZE_ERROR
    assert EQUAL_SIZE_ERROR == "each element in list of batch should be of equal size"


@pytest.mark.parametrize(
    "batch",
    [
        [object(), object()],
        [np.array(["a"]), np.array(["b"])],
        [np.array([1, None], dtype=object)],
        [np.zeros(2), np.zeros(3)],
        [None, None],
    ],
)
def test_errors_match_torch(batch: list[Any]) -> None:
    with pytest.raises((TypeError, RuntimeError)) as theirs:
        torch_collate(batch)
    with pytest.raises((TypeError, RuntimeError)) as ours:
        default_collate(batch)
    assert isinstance(ours.value, type(theirs.value))  # CollateError is a RuntimeError
    assert str(ours.value) == str(theirs.value)


def test_empty_batch_and_overflow_are_named() -> None:
    with pytest.raises(ValueError, match="batch must hold at least one sample but got none"):
        default_collate([])
    with pytest.raises(ValueError, match="batch values must fit int64 but got 9223372036854775808"):
        default_collate([1, 2**63])


def test_a_float_batch_names_the_first_sample_that_is_no_number() -> None:
    with pytest.raises(
        TypeError, match=r"^batch\[2\] must be a number like batch\[0\] but got bool \(True\)$"
    ):
        default_collate([1.5, 2, True])
    with pytest.raises(
        TypeError, match=r"^batch\[1\] must be a number like batch\[0\] but got str \('x'\)$"
    ):
        default_collate([1.5, "x"])


def test_tree_collator_wraps_the_plan() -> None:
    plan = BatchPlan(5, 12, 2, 3, np.array([4, 8], dtype=np.int64))
    batch = TreeCollator()([{"x": np.ones(2, np.float32)}, {"x": np.zeros(2, np.float32)}], plan)
    assert isinstance(batch, TreeBatch)
    assert batch.data["x"].tolist() == [[1.0, 1.0], [0.0, 0.0]]
    assert (batch.global_step, batch.epoch, batch.step, batch.indices.tolist()) == (
        12,
        2,
        3,
        [4, 8],
    )
    with pytest.raises(ValueError, match=r"plan.indices must hold one index per sample \(1\)"):
        TreeCollator()([1], plan)
