"""TarShards reads without a cache: a batch matched to its coalesced ranges, and bad indices."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aioloader.sources import _tar
from aioloader.sources._tar import RangeFinder, TarShards
from aioloader.sources.cache import coalesce

SHARDS, PER_SHARD = 4, 2048
BATCH = SHARDS * PER_SHARD  # 8,192


def _payload(index: int) -> bytes:
    return index.to_bytes(4, "big") * 2


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """4 shards of 2,048 samples of 8 bytes each (one header and one data block apiece)."""
    root = tmp_path_factory.mktemp("batch")
    paths = []
    for s in range(SHARDS):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
            for i in range(s * PER_SHARD, (s + 1) * PER_SHARD):
                info = tarfile.TarInfo(f"{i:05d}.bin")
                info.size = 8
                archive.addfile(info, io.BytesIO(_payload(i)))
        paths.append(root / f"shard-{s}.tar")
        paths[-1].write_bytes(buffer.getvalue())
    return paths


@pytest.mark.anyio
async def test_a_batch_of_8192_is_matched_to_its_ranges_without_a_scan_per_sample(
    shards: list[Path], monkeypatch: pytest.MonkeyPatch, anyio_backend: tuple[str, Any]
) -> None:
    source = TarShards(shards, coalesce_gap=0)  # 504 bytes between samples: a range each
    visits = 0
    most = 4 * BATCH  # a few passes over the ranges; a scan of them per sample would visit
    # about BATCH**2 / 2 = 33,554,432

    class Counted(list[Any]):
        """The batch's ranges, counting every visit of one."""

        def __iter__(self) -> Iterator[Any]:
            nonlocal visits
            for item in super().__iter__():
                visits += 1
                if visits > most:
                    raise AssertionError(f"over {most} visits of a batch's {len(self)} ranges")
                yield item

        def __getitem__(self, position: Any) -> Any:
            nonlocal visits
            visits += 1
            return super().__getitem__(position)

    def counted(*args: Any) -> Counted:
        return Counted(coalesce(*args))

    monkeypatch.setattr(_tar, "coalesce", counted)
    order = np.random.default_rng(7).permutation(BATCH).tolist()  # a global shuffle
    got = await source.read_samples(order)
    assert [sample["bin"] for sample in got] == [_payload(i) for i in order]
    assert [sample["__key__"] for sample in got[:3]] == [f"{i:05d}" for i in order[:3]]
    # gather_ordered passes over the ranges (once on asyncio, twice on trio), the finder
    # indexes them once, and each sample of the batch takes its range once
    passes = 3 if anyio_backend[0] == "trio" else 2
    assert visits == passes * BATCH + BATCH
    visits = 0
    with_duplicates = order[:100] + order[:100]
    again = await source.read_samples(with_duplicates)
    assert [sample["bin"] for sample in again] == [_payload(i) for i in with_duplicates]
    assert visits == passes * 100 + 200


def test_the_range_finder_names_the_range_holding_each_span() -> None:
    spans = [("b", 40, 50), ("a", 0, 10), ("b", 0, 5), ("a", 12, 20), ("a", 100, 110)]
    ranges = coalesce(spans, 4, 1000)
    assert ranges == [("b", 0, 5), ("b", 40, 50), ("a", 0, 20), ("a", 100, 110)]
    finder = RangeFinder(ranges)
    assert [finder.find(key, start) for key, start, _ in spans] == [1, 2, 0, 2, 3]
    assert finder.find("a", 15) == 2  # inside the merged range, not at its start


@pytest.mark.anyio
@pytest.mark.parametrize("index", [BATCH, -1, -BATCH - 1])
async def test_a_bad_index_is_one_clear_index_error(shards: list[Path], index: int) -> None:
    source = TarShards(shards)
    with pytest.raises(IndexError) as raised:
        await source.get_sample(index)
    assert str(raised.value) == f"index must be in [0, {BATCH}) but got {index}"
    assert raised.value.__context__ is None  # not raised again while naming the sample
    assert getattr(raised.value, "__notes__", []) == []
    with pytest.raises(IndexError, match=rf"^index must be in \[0, {BATCH}\) but got {index}$"):
        await source.get_samples([0, index])
