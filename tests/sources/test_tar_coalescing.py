"""TarShards without a cache reads each sample's own bytes: the coalescing rule, and an epoch
on SeaweedFS that reads at most 1.05x the samples' bytes (issue 35 item 2)."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import obstore
import pytest

from aioloader.core import BlockShuffledSampler, ShuffledSampler, digest_stream
from aioloader.engine import DataLoader
from aioloader.sources._tar import COALESCE_GAP, TarShards
from tests._support.s3 import S3Info
from tests.sources.cache.helpers import LoggedShards

# -- the rule ---------------------------------------------------------------------------


def _tar(members: Sequence[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def five(tmp_path: Path) -> Path:
    """One local shard of five one-member samples of 40,000, 20,000, 50,000, 40,000, 60,000 B."""
    sizes = (40_000, 20_000, 50_000, 40_000, 60_000)
    path = tmp_path / "five.tar"
    path.write_bytes(_tar([(f"{i}.jpg", bytes([i]) * size) for i, size in enumerate(sizes)]))
    return path


def test_the_default_request_cost_is_32_kib_and_bad_values_are_named(five: Path) -> None:
    assert COALESCE_GAP == 32 * 1024
    assert TarShards([five]).coalesce_gap == 32 * 1024
    with pytest.raises(ValueError, match=r"^coalesce_gap must be an integer >= 0 but got -1$"):
        TarShards([five], coalesce_gap=-1)
    with pytest.raises(
        TypeError, match=r"^coalesce_gap must be an integer >= 0 but got str \('64k'\)$"
    ):
        TarShards([five], coalesce_gap="64k")  # type: ignore[call-overload]
    with pytest.raises(
        TypeError, match=r"^coalesce_gap must be an integer >= 0 but got a bool \(True\)$"
    ):
        TarShards([five], coalesce_gap=True)


def test_spans_merge_when_the_gap_is_at_most_the_request_cost(five: Path) -> None:
    spans = [
        ("a", 40_000 + 32_769, 80_000),  # 32,769 bytes after the run before it: alone
        ("b", 700, 800),
        ("a", 0, 1_000),
        ("a", 1_512, 2_000),  # a tar header (512 bytes) after the first: merged
        ("a", 2_000 + 32_768, 40_000),  # exactly the request cost: merged
        ("b", 0, 100),  # 600 bytes before ("b", 700, 800): merged, in order of start
        ("a", 0, 1_000),  # repeated: read once
    ]
    default = TarShards([five])
    assert default.plan_ranges(spans) == [("a", 0, 40_000), ("a", 72_769, 80_000), ("b", 0, 800)]
    cheap = TarShards([five], coalesce_gap=511)  # a header costs more than a request
    assert cheap.plan_ranges(spans) == [
        ("a", 0, 1_000),
        ("a", 1_512, 2_000),
        ("a", 34_768, 40_000),
        ("a", 72_769, 80_000),
        ("b", 0, 100),
        ("b", 700, 800),
    ]
    capped = TarShards([five], max_request_bytes=30_000)  # 40,000 merged bytes: too many
    assert capped.plan_ranges(spans) == [
        ("a", 0, 2_000),
        ("a", 34_768, 40_000),
        ("a", 72_769, 80_000),
        ("b", 0, 800),
    ]
    assert TarShards([five], coalesce_gap=0).plan_ranges([("a", 0, 5), ("a", 5, 9)]) == [
        ("a", 0, 9)  # ranges that touch are one read
    ]


@pytest.mark.anyio
async def test_a_batch_reads_its_samples_and_skips_a_sample_larger_than_a_request(
    five: Path,
) -> None:
    source = LoggedShards([five])
    key = str(five)
    spans = [source.span_of(i) for i in range(5)]
    assert spans == [
        (key, 512, 40_512),
        (key, 41_472, 61_472),
        (key, 62_464, 112_464),
        (key, 113_152, 153_152),
        (key, 154_112, 214_112),
    ]
    got = await source.get_samples([4, 0, 2])
    assert [sample["jpg"] for sample in got] == [b"\4" * 60_000, b"\0" * 40_000, b"\2" * 50_000]
    # sample 1 (21,952 bytes with its headers) lies between 0 and 2: cheaper to read than a
    # request; sample 3 (41,648 bytes) between 2 and 4 is not read
    assert sorted(source.log) == [(key, 512, 112_464), (key, 154_112, 214_112)]  # in parallel
    old = LoggedShards([five], coalesce_gap=256 << 10)  # the default before issue 35
    assert await old.get_samples([4, 0, 2]) == got
    assert old.log == [(key, 512, 214_112)]


@pytest.mark.anyio
async def test_a_batchs_requests_are_in_flight_together(five: Path) -> None:
    both = anyio.Event()
    started = 0

    class Meeting(TarShards[Any]):
        async def read_range(self, key: str, start: int, end: int) -> bytes:
            nonlocal started
            started += 1
            if started == 2:
                both.set()
            with anyio.fail_after(10):  # the reads met, or one waits for the other in vain
                await both.wait()
            return await super().read_range(key, start, end)

    got = await Meeting([five]).get_samples([0, 4])
    assert [sample["jpg"] for sample in got] == [b"\0" * 40_000, b"\4" * 60_000]
    assert started == 2


# -- an epoch on SeaweedFS ------------------------------------------------------------------

SHARDS, PER_SHARD, BATCH, SEED = 8, 128, 64, 35
N = SHARDS * PER_SHARD


@dataclass(frozen=True)
class Uploaded:
    """The shards in the S3 server, their saved indices, and what each sample holds."""

    keys: list[str]
    index_dir: Path
    stored: int  # the shards' bytes
    samples: int  # the samples' own bytes (each sample's span: its members and headers)
    jpg_digests: list[str]  # sha256 of each sample's jpg, in dataset order


@pytest.fixture(scope="module")
def uploaded(s3_server: S3Info, tmp_path_factory: pytest.TempPathFactory) -> Uploaded:
    """8 shards of 128 WebDataset samples (jpg of 40-100 KB, cls, id): 72 MB, as W8's."""
    rng = np.random.default_rng(SEED)
    store = s3_server.store()
    keys, stored, digests = [], 0, []
    for s in range(SHARDS):
        members = []
        for i in range(s * PER_SHARD, (s + 1) * PER_SHARD):
            jpg = rng.bytes(int(rng.integers(40_000, 100_001)))
            digests.append(hashlib.sha256(jpg).hexdigest())
            members += [(f"{i:06d}.jpg", jpg), (f"{i:06d}.cls", b"%d" % (i % 1000))]
            members.append((f"{i:06d}.id", b"%d" % i))
        blob = _tar(members)
        keys.append(f"tar-coalescing/shard-{s:02d}.tar")
        obstore.put(store, keys[-1], blob)
        stored += len(blob)
    index_dir = tmp_path_factory.mktemp("indices")
    source = TarShards(keys, store, index_dir=index_dir)  # indexes once, saves the indices
    own = sum(end - start for _, start, end in map(source.span_of, range(N)))
    return Uploaded(keys, index_dir, stored, own, digests)


def _samplers() -> dict[str, Any]:
    return {
        "block": BlockShuffledSampler([PER_SHARD] * SHARDS, BATCH, window=4),
        "global": ShuffledSampler(N, BATCH),
    }


def _collate(samples: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(s["__key__"], hashlib.sha256(s["jpg"]).hexdigest()) for s in samples]


async def _epoch(source: TarShards[Any], sampler: Any) -> tuple[list[Any], int, int]:
    """One epoch through the loader: its batches, and the requests and bytes it read."""
    before = source.statistics()
    assert before is not None
    loader = DataLoader(source, sampler, _collate, seed=SEED, prefetch=4)
    batches = []
    async with loader.stream(0, sampler.steps_per_epoch) as stream:
        async for batch in stream:
            batches.append(batch)
    after = source.statistics()
    assert after is not None
    assert after.retries == before.retries  # every request counted once
    return batches, after.requests - before.requests, after.bytes_read - before.bytes_read


def _want(uploaded: Uploaded, sampler: Any) -> Iterator[list[tuple[str, str]]]:
    for step in range(sampler.steps_per_epoch):
        indices = sampler.indices(SEED, 0, step).tolist()
        yield [(f"{i:06d}", uploaded.jpg_digests[i]) for i in indices]


# (requests, bytes) of one epoch: the default (32 KiB) and the old default (256 KiB), which
# read 1.58x (block) and 1.33x (global) the samples' 73,796,010 bytes
COUNTS = {
    "block": ((898, 73_924_666), (598, 116_936_399)),
    "global": ((953, 73_868_509), (779, 98_463_968)),
}


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["block", "global"])
async def test_an_epoch_without_a_cache_reads_at_most_1_05x_the_samples_bytes(
    s3_server: S3Info, uploaded: Uploaded, kind: str
) -> None:
    sampler = _samplers()[kind]
    source = TarShards(uploaded.keys, s3_server.store(), index_dir=uploaded.index_dir)
    batches, requests, read = await _epoch(source, sampler)
    assert batches == list(_want(uploaded, sampler))
    old = TarShards(
        uploaded.keys, s3_server.store(), index_dir=uploaded.index_dir, coalesce_gap=256 << 10
    )
    old_batches, old_requests, old_read = await _epoch(old, sampler)
    assert digest_stream(old_batches) == digest_stream(batches)  # the same batches
    print(
        f"{kind}: {requests} requests, {read} bytes = {read / uploaded.samples:.4f}x the "
        f"samples' bytes, {read / uploaded.stored:.4f}x the shards' (256 KiB: {old_requests}, "
        f"{old_read} = {old_read / uploaded.samples:.4f}x); samples {uploaded.samples}, "
        f"shards {uploaded.stored}"
    )
    assert ((requests, read), (old_requests, old_read)) == COUNTS[kind]
    assert uploaded.samples == 73_796_010
    assert read <= 1.05 * uploaded.samples  # 1.0017x (block), 1.0010x (global)
