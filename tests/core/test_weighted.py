"""aioloader.core.WeightedRandomSampler: torch's weighted draws as a pure function of
(seed, epoch, step): frequencies, no repeats without replacement, resume, fingerprint."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from aioloader import DataLoader, WeightedRandomSampler
from aioloader.core import RngStream, SampleRng, derive, sampler_identity
from aioloader.core._weighted import _exponentials
from aioloader.testing import MemoryDataset, StackCollator

WEIGHTS = [1.0, 2.0, 3.0, 4.0, 0.0, 10.0]
CHI2_CRITICAL_4_DOF_1_PERCENT = 13.277


def epoch(sampler: WeightedRandomSampler, seed: int, number: int = 0) -> list[int]:
    steps = range(sampler.steps_per_epoch)
    return [i for step in steps for i in sampler.indices(seed, number, step).tolist()]


def chi_square(counts: np.ndarray, weights: list[float]) -> float:
    w = np.asarray(weights)
    expected = counts.sum() * w[w > 0] / w.sum()
    return float((((counts[w > 0] - expected) ** 2) / expected).sum())


def test_with_replacement_the_frequencies_follow_the_weights() -> None:
    sampler = WeightedRandomSampler(WEIGHTS, 20_000, 100)
    counts = np.bincount(epoch(sampler, seed=7), minlength=len(WEIGHTS))
    assert counts.tolist() == [1000, 1992, 2938, 4012, 0, 10058]
    statistic = chi_square(counts, WEIGHTS)
    assert statistic == pytest.approx(1.68573, abs=1e-5)
    assert statistic < CHI2_CRITICAL_4_DOF_1_PERCENT


def test_with_replacement_slot_j_is_the_contracts_draw() -> None:
    sampler = WeightedRandomSampler(WEIGHTS, 20, 4, drop_last=False)
    cdf = np.cumsum(WEIGHTS)
    for step in (0, 3):
        expected = []
        for slot in range(4):
            u = SampleRng(derive(5, 2, step, slot, RngStream.WEIGHTED)).next_double()
            expected.append(int(np.searchsorted(cdf, u * cdf[-1], side="right")))
        assert sampler.indices(5, 2, step).tolist() == expected


def test_without_replacement_the_first_draw_follows_the_weights() -> None:
    """Over 3000 epochs, the first index of each is distributed as the weights."""
    sampler = WeightedRandomSampler(WEIGHTS, 5, 5, replacement=False)
    firsts = [int(sampler.epoch_order(3, e)[0]) for e in range(3000)]
    counts = np.bincount(firsts, minlength=len(WEIGHTS))
    assert counts.tolist() == [167, 275, 440, 632, 0, 1486]
    statistic = chi_square(counts, WEIGHTS)
    assert statistic == pytest.approx(6.06956, abs=1e-5)
    assert statistic < CHI2_CRITICAL_4_DOF_1_PERCENT


@pytest.mark.parametrize("num_samples", [1, 500, 857])
def test_without_replacement_indices_are_distinct_and_never_of_weight_zero(
    num_samples: int,
) -> None:
    weights = np.arange(1000, dtype=np.float64) % 7  # every 7th weight is 0
    sampler = WeightedRandomSampler(weights, num_samples, 1, replacement=False, drop_last=False)
    drawn = epoch(sampler, seed=11)
    assert len(drawn) == num_samples
    assert len(set(drawn)) == num_samples
    assert all(weights[i] > 0 for i in drawn)


def test_without_replacement_every_positive_weight_once_when_all_are_asked_for() -> None:
    weights = [0.5, 0.0, 2.0, 1e-9, 3.0]
    sampler = WeightedRandomSampler(weights, 4, 4, replacement=False)
    assert sorted(sampler.indices(0, 0, 0).tolist()) == [0, 2, 3, 4]


@pytest.mark.parametrize("num_samples", [1 << 20, 300_000])
def test_without_replacement_the_order_is_by_key_then_index(num_samples: int) -> None:
    """The packed sort (key bits above, index below) and its fix-up of truncated ties give
    exactly the order of (full key, index)."""
    n = 1 << 20
    weights = np.ones(n)
    weights[::3] = 2.0
    sampler = WeightedRandomSampler(weights, num_samples, 1024, replacement=False)
    items = np.arange(n, dtype=np.uint64)
    keys = sampler._keys(9, 4, items)
    expected = np.lexsort((np.arange(n), keys))[:num_samples]
    truncated = keys.view(np.uint64)[expected] >> np.uint64(20)
    assert int((truncated[1:] == truncated[:-1]).sum()) > 0  # the fix-up had work to do
    assert sampler.epoch_order(9, 4).tolist() == expected.tolist()


def test_the_keys_are_pinned_bit_for_bit() -> None:
    """No libm call: the keys, so the epochs, are the same bits on every platform."""
    sampler = WeightedRandomSampler(np.linspace(0.5, 2.0, 10_000), 10_000, 100, replacement=False)
    keys = sampler._keys(1, 0, np.arange(10_000, dtype=np.uint64))
    assert hashlib.sha256(keys.tobytes()).hexdigest()[:16] == "8787a80201882b7d"
    order = sampler.epoch_order(1, 0).astype("<i8")
    assert hashlib.sha256(order.tobytes()).hexdigest()[:16] == "3d6f6a388fc59c41"
    assert sampler.indices(1, 0, 0)[:5].tolist() == [7272, 8107, 4259, 3120, 9868]


def test_the_logarithm_is_within_1e_14_of_libm() -> None:
    u = np.concatenate([[1.0, 2.0**-53, 0.5, np.nextafter(1.0, 0.0)], np.linspace(1e-9, 1, 10001)])
    exact = -np.log(u)
    assert np.all(np.abs(_exponentials(u) - exact) <= 1e-14 * np.maximum(exact, 1e-300) + 1e-300)
    assert np.signbit(_exponentials(np.array([1.0]))).tolist() == [False]


@pytest.mark.parametrize("replacement", [True, False], ids=["replacement", "no-replacement"])
def test_a_batch_is_a_pure_function_of_seed_epoch_step(replacement: bool) -> None:
    def sampler() -> WeightedRandomSampler:
        return WeightedRandomSampler(np.arange(1, 13), 12, 4, replacement=replacement)

    first, second = sampler(), sampler()
    assert [second.indices(3, 1, s).tolist() for s in (2, 0, 1)] == [
        first.indices(3, 1, s).tolist() for s in (2, 0, 1)
    ]
    assert epoch(first, 3, 1) != epoch(first, 3, 2)


def make_loader(sampler: WeightedRandomSampler) -> DataLoader[Any, Any]:
    return DataLoader(MemoryDataset(list(range(100))), sampler, StackCollator(), seed=21)


@pytest.mark.parametrize("replacement", [True, False], ids=["replacement", "no-replacement"])
def test_resume_mid_epoch_gives_the_remaining_batches(replacement: bool) -> None:
    def sampler() -> WeightedRandomSampler:
        return WeightedRandomSampler(np.arange(100) % 5, 60, 8, replacement=replacement)

    whole = [batch.data.tolist() for batch in make_loader(sampler()).iter_sync(0, 7)]
    first = make_loader(sampler())
    batches: Iterator[Any] = iter(first)
    taken = [next(batches).data.tolist() for _ in range(3)]
    state = first.state_dict()
    assert state["next_step"] == 3
    resumed = make_loader(sampler())
    resumed.load_state_dict(state)
    assert taken + [batch.data.tolist() for batch in resumed] == whole


def test_the_fingerprint_changes_when_one_weight_changes() -> None:
    weights = np.linspace(0.0, 1.0, 1000)
    changed = weights.copy()
    changed[500] = np.nextafter(changed[500], 2.0)  # one ulp
    first, second = (WeightedRandomSampler(w, 100, 10) for w in (weights, changed))
    assert sampler_identity(first) != sampler_identity(second)
    state = make_loader(first).state_dict()
    with pytest.raises(ValueError, match=r"state\['fingerprint'\] must match"):
        make_loader(second).load_state_dict(state)
    fields = sampler_identity(first)["fields"]
    assert fields["replacement"] is True
    assert sampler_identity(WeightedRandomSampler(weights, 100, 10, replacement=False)) != (
        sampler_identity(first)
    )


@pytest.mark.parametrize(
    ("weights", "error", "message"),
    [
        ([], ValueError, r"weights must hold at least one weight but got an empty sequence"),
        ([[1.0, 2.0]], ValueError, r"weights must be one-dimensional but got shape \(1, 2\)"),
        (
            [1.0, float("nan")],
            ValueError,
            r"finite and >= 0 but got weights\[1\] = np.float64\(nan\)",
        ),
        (
            [1.0, float("inf")],
            ValueError,
            r"finite and >= 0 but got weights\[1\] = np.float64\(inf\)",
        ),
        ([1, -2], ValueError, r"finite and >= 0 but got weights\[1\] = np.int64\(-2\)"),
        ([0, 0, 0], ValueError, r"weights must not all be zero but got 3 zeros"),
        ("abc", TypeError, r"weights must be a 1-D sequence of numbers but got a string"),
        (["a", "b"], TypeError, r"weights must hold real numbers but got dtype <U1"),
        ([1e308, 1e308], ValueError, r"weights must have a finite sum but their sum overflows"),
    ],
)
def test_bad_weights_are_refused_naming_the_rule(weights: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        WeightedRandomSampler(weights, 2, 1)


def test_more_samples_than_positive_weights_without_replacement_is_refused() -> None:
    with pytest.raises(
        ValueError,
        match=r"num_samples must be <= the number of weights > 0 "
        r"without replacement \(2\) but got 3",
    ):
        WeightedRandomSampler([1, 0, 1], 3, 1, replacement=False)
    with pytest.raises(ValueError, match=r"num_samples must be >= batch_size with drop_last"):
        WeightedRandomSampler([1, 1], 3, 4)


def test_batch_sizes_and_steps() -> None:
    sampler = WeightedRandomSampler(WEIGHTS, 10, 4, drop_last=False)
    assert (sampler.steps_per_epoch, sampler.batch_sizes) == (3, frozenset({4, 2}))
    assert [len(sampler.indices(0, 0, s)) for s in range(3)] == [4, 4, 2]
    assert WeightedRandomSampler(WEIGHTS, 10, 4).steps_per_epoch == 2
    with pytest.raises(ValueError, match="epoch_order needs replacement=False"):
        sampler.epoch_order(0, 0)
