"""aioloader.engine._bad_samples: DataLoader(on_error=...) replaces bad samples, a pure function."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from aioloader.core import ShuffledSampler, plan_batch
from aioloader.core._replacement import replacement_index
from aioloader.engine import DataLoader
from aioloader.engine._bad_samples import MAX_ATTEMPTS, BadSampleError, SkippedSample
from tests.engine.process_helpers import (
    BAD_INDICES,
    N_ROWS,
    SyncRows,
    index_rows,
    refuse_bad_rows,
    stack_rows,
)

pytestmark = pytest.mark.anyio

SEED = 99
N = N_ROWS
BATCH = 8


class AsyncRows(SyncRows):
    """The same samples behind ``async get_sample``."""

    async def get_sample(self, index: int) -> npt.NDArray[np.float64]:
        return self[index]


class BatchedRows(SyncRows):
    """The same samples behind ``async get_samples``."""

    async def get_samples(self, indices: Sequence[int]) -> list[npt.NDArray[np.float64]]:
        return [self[index] for index in indices]


def expected_indices(step: int, bad: frozenset[int] = BAD_INDICES) -> list[int]:
    """The indices of ``step`` with every bad one replaced by the pure function."""
    plan = plan_batch(ShuffledSampler(N, BATCH), SEED, step)
    out = []
    for slot, index in enumerate(plan.indices.tolist()):
        attempt = 0
        while index in bad:
            attempt += 1
            index = replacement_index(SEED, plan.epoch, plan.step, slot, attempt, N)
        out.append(index)
    return out


def make_loader(dataset: Any, **options: Any) -> DataLoader[Any, Any]:
    options.setdefault("on_error", "skip")
    return DataLoader(dataset, ShuffledSampler(N, BATCH), stack_rows, seed=SEED, **options)


async def collect(loader: DataLoader[Any, Any], start: int, stop: int) -> list[list[int]]:
    async with loader.stream(start, stop) as batches:
        return [batch.astype(int).tolist() async for batch in batches]


STEPS = 10  # two epochs: each bad index appears once per epoch


def test_the_replacements_are_the_pure_functions_values() -> None:
    replaced = {
        (step, slot): index
        for step in range(STEPS)
        for slot, (index, planned) in enumerate(
            zip(
                expected_indices(step),
                plan_batch(ShuffledSampler(N, BATCH), SEED, step).indices.tolist(),
                strict=True,
            )
        )
        if planned in BAD_INDICES
    }
    assert replaced == {(3, 2): 35, (4, 1): 22, (5, 0): 21, (8, 1): 32}


@pytest.mark.parametrize("kind", [SyncRows, AsyncRows, BatchedRows])
@pytest.mark.parametrize("workers", [0, 2])
async def test_skip_replaces_failed_reads_by_the_pure_function(kind: type, workers: int) -> None:
    loader = make_loader(kind(), workers=workers)
    batches = await collect(loader, 0, STEPS)
    assert batches == [expected_indices(step) for step in range(STEPS)]
    stats = loader.statistics()
    assert stats.samples_skipped == 4
    skipped = sorted(stats.skipped)  # builders of different steps finish in any order
    assert [(s.global_step, s.slot, s.dataset_index) for s in skipped] == [
        (3, 2, 3),
        (4, 1, 17),
        (5, 0, 17),
        (8, 1, 3),
    ]
    assert skipped[0].reason.startswith("OSError: cannot read sample 3; path: /data/3.bin")


@pytest.mark.parametrize("options", [{"workers": 0}, {"workers": 2}])
async def test_skip_replaces_samples_whose_transform_fails(options: dict[str, Any]) -> None:
    loader = make_loader(index_rows(N), transform=refuse_bad_rows, **options)
    assert await collect(loader, 0, STEPS) == [expected_indices(step) for step in range(STEPS)]
    assert loader.statistics().samples_skipped == 4


@pytest.mark.parametrize("kind", [SyncRows, AsyncRows])
async def test_process_workers_give_the_same_replacements(kind: type) -> None:
    loader = make_loader(
        kind(), transform=refuse_bad_rows, executor="process", workers=2, prefetch=3
    )
    assert await collect(loader, 0, STEPS) == [expected_indices(step) for step in range(STEPS)]


async def test_a_resumed_stream_gives_the_same_replacements() -> None:
    loader = make_loader(AsyncRows(), workers=2)
    whole = await collect(loader, 0, STEPS)
    assert await collect(make_loader(AsyncRows()), 4, STEPS) == whole[4:]
    resumed = make_loader(SyncRows(), workers=0)
    resumed.load_state_dict({**loader.state_dict(), "next_step": 7})
    got = []
    async with resumed.stream() as batches:
        async for batch in batches:
            got.append(batch.astype(int).tolist())
            if len(got) == 3:
                break
    assert got == whole[7:10]


async def test_a_replacement_that_fails_too_draws_the_next_attempt() -> None:
    first = replacement_index(SEED, 0, 3, 2, 1, N)  # what replaces index 3 at step 3
    assert first == 35
    bad = BAD_INDICES | {first}
    loader = make_loader(index_rows(N), transform=_refusing(bad))
    (batch,) = await collect(loader, 3, 4)
    assert batch == expected_indices(3, bad)
    assert batch[2] == replacement_index(SEED, 0, 3, 2, 2, N) == 11
    assert loader.statistics().samples_skipped == 2


def _refusing(bad: frozenset[int]) -> Any:
    def transform(sample: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        if int(sample[0]) in bad:
            raise ValueError(f"bad row {int(sample[0])}")
        return sample

    return transform


async def test_a_handler_returns_the_sample_or_none_to_skip() -> None:
    seen: list[tuple[str, int]] = []

    def on_error(error: Exception, index: int) -> Any:
        seen.append((type(error).__name__, index))
        return np.array([-1.0]) if index == 3 else None

    loader = make_loader(AsyncRows(), on_error=on_error)
    batches = await collect(loader, 0, STEPS)
    assert sorted(seen) == [("OSError", 3), ("OSError", 3), ("OSError", 17), ("OSError", 17)]
    expected = [expected_indices(step) for step in range(STEPS)]
    expected[3][2] = expected[8][1] = -1
    assert batches == expected
    assert loader.on_error is on_error


async def test_every_attempt_failing_raises_naming_all_of_them() -> None:
    loader = make_loader(index_rows(N), transform=_refusing(frozenset(range(N))))
    with pytest.raises(BadSampleError) as caught:
        await collect(loader, 0, 1)
    message = str(caught.value)
    assert message.startswith(f"{MAX_ATTEMPTS} samples failed in a row for slot 0 of global step 0")
    assert message.count("\n  index ") == MAX_ATTEMPTS
    assert loader.statistics().samples_skipped == MAX_ATTEMPTS - 1


async def test_each_skip_is_a_warning_on_the_aioloader_samples_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loader = make_loader(AsyncRows())
    with caplog.at_level(logging.WARNING, logger="aioloader.samples"):
        await collect(loader, 3, 4)
    (record,) = [r for r in caplog.records if r.name == "aioloader.samples"]
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(
        "aioloader: skipped dataset index 3 (global step 3, slot 2): OSError: cannot read "
        "sample 3; path: /data/3.bin"
    )


async def test_raise_stays_the_default() -> None:
    loader: DataLoader[Any, Any] = DataLoader(
        AsyncRows(), ShuffledSampler(N, BATCH), stack_rows, seed=SEED
    )
    with pytest.raises(OSError, match="cannot read sample 3") as caught:
        await collect(loader, 3, 4)
    note = "aioloader: while building global step 3 (epoch 0, step 3), slot 2, dataset index 3"
    assert note in getattr(caught.value, "__notes__", [])
    assert loader.statistics().samples_skipped == 0
    assert loader.statistics().skipped == ()


def test_skipped_sample_fields() -> None:
    assert SkippedSample(1, 2, 3, "x")._asdict() == {
        "global_step": 1,
        "slot": 2,
        "dataset_index": 3,
        "reason": "x",
    }


def test_bad_on_error_values_are_refused() -> None:
    with pytest.raises(
        ValueError, match=r"on_error must be 'raise', 'skip' or a callable .* 'ignore'"
    ):
        make_loader(AsyncRows(), on_error="ignore")
    with pytest.raises(TypeError, match=r"on_error must be .* but got int"):
        make_loader(AsyncRows(), on_error=5)
