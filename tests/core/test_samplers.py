"""aioloader.core._samplers: exact sequences, properties, edge cases and bad input."""

from __future__ import annotations

import itertools
import math
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioloader.core import (
    BucketedSampler,
    MixingSampler,
    SampleRng,
    SequentialSampler,
    ShuffledSampler,
    derive,
    keyed_permutation,
)
from aioloader.core._samplers import RecentEpochs, check_sampler

SEEDS = st.integers(0, 2**64 - 1)


def _epoch(sampler: Any, seed: int, epoch: int) -> list[list[int]]:
    return [sampler.indices(seed, epoch, s).tolist() for s in range(sampler.steps_per_epoch)]


def _mixing_reference(sampler: MixingSampler, seed: int, epoch: int, step: int) -> list[int]:
    """Straight scalar reading of docs/samplers.md, "MixingSampler"."""
    eligible = [
        k for k, (n, w) in enumerate(zip(sampler.sizes, sampler.shares, strict=True)) if n and w
    ]
    total = 0.0
    for k in eligible:
        total += sampler.shares[k]
    out = []
    for slot in range(sampler.batch_size):
        rng = SampleRng(derive(seed, epoch, step, slot, 102))
        u, c, chosen = rng.next_double(), 0.0, eligible[-1]
        for k in eligible:
            c += sampler.shares[k] / total
            if u < c:
                chosen = k
                break
        out.append(sum(sampler.sizes[:chosen]) + rng.next_int(sampler.sizes[chosen]))
    return out


def test_sequential_batches() -> None:
    sampler = SequentialSampler(10, 3, drop_last=False)
    assert sampler.steps_per_epoch == 4
    assert _epoch(sampler, 0, 0) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert SequentialSampler(10, 3).steps_per_epoch == 3
    assert _epoch(SequentialSampler(10, 3), 7, 5) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert sampler.indices(0, 0, 0).dtype == np.int64


def test_shuffled_matches_scalar_definition() -> None:
    sampler = ShuffledSampler(10, 4, drop_last=False)
    key = derive(42, 3, 0, 0, 101)
    expected = [keyed_permutation(p, 10, key) for p in range(10)]
    assert list(itertools.chain.from_iterable(_epoch(sampler, 42, 3))) == expected
    assert [len(b) for b in _epoch(sampler, 42, 3)] == [4, 4, 2]


def test_pinned_sequences() -> None:
    """Golden values: any change to the stream shows up here first."""
    shuffled = ShuffledSampler(10, 3, drop_last=False)
    assert _epoch(shuffled, 1, 0) == [[2, 7, 0], [1, 5, 8], [3, 6, 4], [9]]
    bucketed = BucketedSampler([5, 23, 9, 31, 14, 7, 18, 4, 27, 11, 16, 8], 4, 3)
    assert _epoch(bucketed, 0, 0) == [[2, 9, 4, 10], [7, 0, 5, 11], [6, 1, 8, 3]]
    assert MixingSampler([10, 20], [1, 3], 4).indices(2024, 0, 0).tolist() == [11, 27, 11, 19]


def test_shuffled_epochs_differ_and_repeat() -> None:
    sampler = ShuffledSampler(1000, 10)
    assert _epoch(sampler, 5, 0) == _epoch(sampler, 5, 0)
    assert _epoch(sampler, 5, 0) != _epoch(sampler, 5, 1)
    assert _epoch(sampler, 5, 0) != _epoch(sampler, 6, 0)


@settings(max_examples=50)
@given(st.integers(1, 500), st.integers(1, 64), st.booleans(), SEEDS, st.integers(0, 2**64 - 1))
def test_shuffled_every_index_once(
    n: int, batch: int, drop_last: bool, seed: int, epoch: int
) -> None:
    sampler = ShuffledSampler(n, batch, drop_last=drop_last)
    served = list(itertools.chain.from_iterable(_epoch(sampler, seed, epoch)))
    assert len(served) == len(set(served))
    if not drop_last or n % batch == 0:
        assert sorted(served) == list(range(n))
    else:
        assert len(served) == (n // batch) * batch


def test_shuffled_over_2_to_40_needs_no_table() -> None:
    sampler = ShuffledSampler(2**40, 1024)
    batch = sampler.indices(3, 7, 10**6)
    key = derive(3, 7, 0, 0, 101)
    assert batch.tolist()[:4] == [keyed_permutation(10**6 * 1024 + i, 2**40, key) for i in range(4)]
    assert len(set(batch.tolist())) == 1024
    assert int(batch.max()) < 2**40


@pytest.mark.parametrize(("n", "batch", "drop_last"), [(20_011, 100, False), (2**20, 1024, True)])
def test_shuffled_spans_give_perm_across_their_edges(n: int, batch: int, drop_last: bool) -> None:
    sampler = ShuffledSampler(n, batch, drop_last)
    per_span = ShuffledSampler.SPAN // batch  # 81 and 8 steps: span edges inside the epoch
    last = sampler.steps_per_epoch - 1
    steps = [0, per_span - 1, per_span, per_span + 1, 2 * per_span, last, per_span, 0]
    key = derive(5, 2, 0, 0, 101)
    for step in steps:
        stop = min(step * batch + batch, n)
        expected = [keyed_permutation(p, n, key) for p in range(step * batch, stop)]
        assert sampler.indices(5, 2, step).tolist() == expected
    assert sampler.indices(5, 2, last).shape == ((batch,) if drop_last else (n % batch,))


def test_shuffled_holds_one_span_whatever_n() -> None:
    for n in (2**14, 2**20, 2**40):
        sampler = ShuffledSampler(n, 128)
        for step in (0, 63, 64, 100):
            sampler.indices(1, 0, step)
        held = sampler._span  # the one array it keeps
        assert held is not None
        assert held[3].shape == (ShuffledSampler.SPAN,)
        assert held[:3] == (1, 0, 1)  # step 100 is in the second span of 64 steps


def test_mixing_matches_scalar_reading() -> None:
    sampler = MixingSampler([100, 0, 50, 7], [1.0, 5.0, 3.0, 0.5], 16)
    for step in range(5):
        assert sampler.indices(9, 2, step).tolist() == _mixing_reference(sampler, 9, 2, step)


def test_mixing_rejection_lane_matches_scalar() -> None:
    sampler = MixingSampler([2**62 + 1], [1.0], 64, steps_per_epoch=3)
    for step in range(3):
        assert sampler.indices(4, 0, step).tolist() == _mixing_reference(sampler, 4, 0, step)


def test_mixing_counts_within_four_sigma() -> None:
    shares = [0.5, 0.3, 0.2]
    sampler = MixingSampler([1000, 1000, 1000], shares, 100, steps_per_epoch=100)
    draws = np.concatenate([sampler.indices(11, 0, s) for s in range(100)])
    assert draws.shape == (10_000,)
    counts = np.bincount(draws // 1000, minlength=3)
    for count, p in zip(counts, shares, strict=True):
        sigma = math.sqrt(10_000 * p * (1 - p))
        assert abs(count - 10_000 * p) <= 4 * sigma


def test_mixing_zero_share_and_empty_source_never_drawn() -> None:
    sampler = MixingSampler([10, 10, 0, 10], [1.0, 0.0, 9.0, 1.0], 50, steps_per_epoch=20)
    draws = np.concatenate([sampler.indices(0, 0, s) for s in range(20)])
    assert set(np.unique(draws // 10).tolist()) == {0, 2}  # 20..29 is source 3 (start 20)
    assert not np.any((draws >= 10) & (draws < 20))


def test_mixing_fallback_is_last_eligible_source() -> None:
    # A share so tiny that the cumulative sum rounds to 1 - eps can leave u above every bound.
    sampler = MixingSampler([5, 5], [1.0, 1e-300], 4)
    assert sampler.steps_per_epoch == 2
    assert set(sampler.indices(1, 0, 0).tolist()) <= set(range(10))
    assert _mixing_reference(sampler, 1, 0, 0) == sampler.indices(1, 0, 0).tolist()


def test_mixing_default_steps() -> None:
    assert MixingSampler([3, 4], [1, 1], 10).steps_per_epoch == 1
    assert MixingSampler([30, 40], [1, 1], 10).steps_per_epoch == 7
    assert MixingSampler([30, 40], [1, 1], 10, steps_per_epoch=99).steps_per_epoch == 99


def _bucket_reference(
    lengths: list[int], batch: int, pool_batches: int, seed: int, epoch: int
) -> list[list[int]]:
    n = len(lengths)
    steps = n // batch
    order = [keyed_permutation(p, n, derive(seed, epoch, 0, 0, 103)) for p in range(steps * batch)]
    pool = batch * pool_batches
    ordered: list[int] = []
    for start in range(0, len(order), pool):
        ordered += sorted(order[start : start + pool], key=lambda i: (lengths[i] << 32) | i)
    batches = [ordered[t * batch : (t + 1) * batch] for t in range(steps)]
    plan: list[list[int]] = [[] for _ in range(steps)]
    for t, items in enumerate(batches):
        plan[keyed_permutation(t, steps, derive(seed, epoch, 1, 0, 104))] = items
    return plan


def test_bucketed_matches_scalar_reading() -> None:
    lengths = [5, 23, 9, 31, 14, 7, 18, 4, 27, 11, 16, 8, 3, 3, 3]
    sampler = BucketedSampler(lengths, 4, 2)
    assert sampler.steps_per_epoch == 3
    for epoch in range(3):
        assert _epoch(sampler, 17, epoch) == _bucket_reference(lengths, 4, 2, 17, epoch)


@settings(max_examples=40)
@given(
    st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=300),
    st.integers(1, 16),
    st.integers(1, 5),
    SEEDS,
)
def test_bucketed_properties(lengths: list[int], batch: int, pool_batches: int, seed: int) -> None:
    sampler = BucketedSampler(lengths, batch, pool_batches)
    steps = len(lengths) // batch
    assert sampler.steps_per_epoch == steps
    if steps == 0:
        return
    plan = _epoch(sampler, seed, 1)
    key = derive(seed, 1, 0, 0, 103)
    first = sorted(keyed_permutation(p, len(lengths), key) for p in range(steps * batch))
    assert sorted(itertools.chain.from_iterable(plan)) == first
    for items in plan:
        keys = [(lengths[i], i) for i in items]
        assert keys == sorted(keys)
    assert plan == _bucket_reference(lengths, batch, pool_batches, seed, 1)


def test_bucketed_caches_two_epochs_and_is_thread_safe() -> None:
    sampler = BucketedSampler(np.arange(1000) % 37, 10, 4)
    results: dict[int, list[list[int]]] = {}

    def work(epoch: int) -> None:
        results[epoch] = _epoch(sampler, 3, epoch % 3)

    threads = [threading.Thread(target=work, args=(e,)) for e in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for epoch in range(6):
        assert results[epoch] == _bucket_reference(list(np.arange(1000) % 37), 10, 4, 3, epoch % 3)
    assert sampler.epoch_plan(3, 0) is sampler.epoch_plan(3, 0)
    assert not sampler.epoch_plan(3, 0).flags.writeable


def test_samplers_return_fresh_arrays() -> None:
    sampler = BucketedSampler([1, 2, 3, 4], 2, 1)
    first = sampler.indices(0, 0, 0)
    first[0] = 99
    assert sampler.indices(0, 0, 0).tolist() != first.tolist()


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: ShuffledSampler(0, 4), ValueError, "n must be an integer in [1, 2^63) but got 0"),
        (
            lambda: ShuffledSampler(10, 0),
            ValueError,
            "batch_size must be an integer in [1, 2^24] but got 0",
        ),
        (
            lambda: SequentialSampler(10.0, 2),  # type: ignore[arg-type]
            TypeError,
            "n must be an integer but got float (10.0)",
        ),
        (
            lambda: SequentialSampler(10, 2, drop_last=1),  # type: ignore[arg-type]
            TypeError,
            "drop_last must be a bool but got int",
        ),
        (
            lambda: MixingSampler([1, 2], [1.0, float("nan")], 2),
            ValueError,
            "shares[1] must be finite and >= 0 but got nan",
        ),
        (
            lambda: MixingSampler([1, 2], [-1.0, 1.0], 2),
            ValueError,
            "shares[0] must be finite and >= 0 but got -1.0",
        ),
        (
            lambda: MixingSampler([1, 2], [1.0, float("inf")], 2),
            ValueError,
            "shares[1] must be finite and >= 0 but got inf",
        ),
        (
            lambda: MixingSampler([1, 2], [0, 0], 2),
            ValueError,
            "sizes and shares must give at least one source with size > 0 and share > 0"
            " but got sizes=[1, 2] shares=[0.0, 0.0]",
        ),
        (
            lambda: MixingSampler([0, 0], [1, 1], 2),
            ValueError,
            "sizes and shares must give at least one source with size > 0 and share > 0"
            " but got sizes=[0, 0] shares=[1.0, 1.0]",
        ),
        (
            lambda: MixingSampler([1, 2], [1.0], 2),
            ValueError,
            "sizes and shares must have the same length but got 2 and 1",
        ),
        (
            lambda: MixingSampler([1, -2], [1, 1], 2),
            ValueError,
            "sizes[1] must be an integer in [0, 2^63) but got -2",
        ),
        (
            lambda: BucketedSampler([1, 2**32], 1, 1),
            ValueError,
            "lengths must be integers in [0, 2^32) but got 4294967296",
        ),
        (
            lambda: BucketedSampler([1, -1], 1, 1),
            ValueError,
            "lengths must be integers in [0, 2^32) but got -1",
        ),
        (
            lambda: BucketedSampler([1.5, 2.0], 1, 1),
            TypeError,
            "lengths must hold integers but got dtype float64",
        ),
        (
            lambda: BucketedSampler([], 1, 1),
            ValueError,
            "lengths must hold at least one item but got an empty sequence",
        ),
        (
            lambda: BucketedSampler([1, 2], 1, 0),
            ValueError,
            "pool_batches must be an integer in [1, 2^63) but got 0",
        ),
    ],
)
def test_constructors_reject_bad_input(build: Any, error: type, message: str) -> None:
    with pytest.raises(error) as info:
        build()
    assert str(info.value) == message


@pytest.mark.parametrize(
    "sampler",
    [
        SequentialSampler(10, 3),
        ShuffledSampler(10, 3),
        MixingSampler([5, 5], [1, 1], 3),
        BucketedSampler(list(range(10)), 3, 2),
    ],
    ids=["sequential", "shuffled", "mixing", "bucketed"],
)
def test_indices_reject_bad_positions(sampler: Any) -> None:
    steps = sampler.steps_per_epoch
    with pytest.raises(ValueError, match=r"^step must be") as info:
        sampler.indices(0, 0, steps)
    assert (
        str(info.value)
        == f"step must be an integer in [0, steps_per_epoch) = [0, {steps}) but got {steps}"
    )
    with pytest.raises(ValueError, match=r"^seed must be an integer in \[0, 2\^64\) but got -1$"):
        sampler.indices(-1, 0, 0)
    with pytest.raises(
        ValueError, match=r"^seed must be an integer in \[0, 2\^64\) but got 18446744073709551616$"
    ):
        sampler.indices(2**64, 0, 0)
    with pytest.raises(ValueError, match=r"^epoch must be an integer in \[0, 2\^64\) but got -1$"):
        sampler.indices(0, -1, 0)
    with pytest.raises(TypeError, match=r"^step must be an integer but got float \(0.0\)$"):
        sampler.indices(0, 0, 0.0)


def test_zero_steps_sampler_rejects_every_step() -> None:
    sampler = ShuffledSampler(3, 4)
    assert sampler.steps_per_epoch == 0
    with pytest.raises(ValueError, match="fewer items than one batch"):
        sampler.indices(0, 0, 0)


def test_check_sampler_names_what_is_missing() -> None:
    sampler = SequentialSampler(4, 2)
    assert check_sampler(sampler) is sampler
    with pytest.raises(TypeError, match=r"^sampler must have steps_per_epoch and indices"):
        check_sampler([1, 2])

    class Empty:
        steps_per_epoch = 0

        def indices(self, seed: int, epoch: int, step: int) -> np.ndarray:
            raise AssertionError("never called")

    with pytest.raises(ValueError, match=r"^sampler has steps_per_epoch = 0: fewer items than"):
        check_sampler(Empty())
    empty = Empty()
    assert check_sampler(empty, needs_a_step=False) is empty


def test_recent_epochs_builds_each_epoch_once_and_keeps_the_latest() -> None:
    built: list[tuple[int, int]] = []

    def build(seed: int, epoch: int) -> tuple[int, int]:
        built.append((seed, epoch))
        return (seed, epoch)

    epochs = RecentEpochs(build, limit=2)
    assert [epochs.get(1, 0), epochs.get(1, 0), epochs.get(1, 1), epochs.get(1, 0)] == [
        (1, 0),
        (1, 0),
        (1, 1),
        (1, 0),
    ]
    assert built == [(1, 0), (1, 1)]
    epochs.get(1, 2)  # evicts (1, 1), the least recently used
    epochs.get(1, 0)
    epochs.get(1, 1)
    assert built == [(1, 0), (1, 1), (1, 2), (1, 1)]


BUCKET_LENGTHS = [5, 23, 9, 31, 14, 7, 18, 4, 27, 11, 16, 8, 3, 40]


def test_bucketed_without_drop_last_serves_every_item_once_with_one_short_batch() -> None:
    kept = BucketedSampler(BUCKET_LENGTHS, 4, 2)
    sampler = BucketedSampler(BUCKET_LENGTHS, 4, 2, drop_last=False)
    assert (kept.steps_per_epoch, sampler.steps_per_epoch) == (3, 4)
    assert repr(kept) == "BucketedSampler(n=14, batch_size=4, pool_batches=2)"
    assert repr(sampler) == "BucketedSampler(n=14, batch_size=4, pool_batches=2, drop_last=False)"
    for epoch in (0, 1):
        batches = [sampler.indices(11, epoch, step).tolist() for step in range(4)]
        assert sorted(len(batch) for batch in batches) == [2, 4, 4, 4]
        assert sorted(i for batch in batches for i in batch) == list(range(14))
        for batch in batches:
            keys = [(BUCKET_LENGTHS[i], i) for i in batch]
            assert keys == sorted(keys)
        plan = sampler.epoch_plan(11, epoch)
        assert plan.tolist() == [i for batch in batches for i in batch]
        assert not plan.flags.writeable
    assert [sampler.indices(11, 0, step).tolist() for step in range(4)] == [
        [6, 1, 3, 13],
        [7, 5, 11, 4],
        [12, 0, 2, 9],
        [10, 8],
    ]


def test_bucketed_without_a_remainder_is_the_same_with_or_without_drop_last() -> None:
    lengths = BUCKET_LENGTHS[:12]
    kept, full = BucketedSampler(lengths, 4, 2), BucketedSampler(lengths, 4, 2, drop_last=False)
    assert [kept.indices(5, 2, s).tolist() for s in range(3)] == [
        full.indices(5, 2, s).tolist() for s in range(3)
    ]
    with pytest.raises(TypeError, match="drop_last must be a bool but got int"):
        BucketedSampler(lengths, 4, 2, drop_last=0)  # type: ignore[arg-type]
