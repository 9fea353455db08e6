"""The cache changes no error a user sees: the same exception types with and without it,
and a disk-tier I/O error degrades it to memory only instead of failing the batch."""

from __future__ import annotations

import contextvars
import errno
import os
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from aioloader import MalformedShardError
from aioloader.core import plan_batch
from aioloader.sources._tar import TarShards
from aioloader.sources.cache import KnownFutureCache
from tests.sources.cache.helpers import (
    PER_SHARD,
    SEED,
    SHARDS,
    N,
    expected_batches,
    samplers,
    shard_blobs,
    want_of,
)

BLOBS = shard_blobs()
WANT = want_of(BLOBS)
DATASET = sum(len(blob) for blob in BLOBS)


@pytest.mark.anyio
@pytest.mark.parametrize("cache", ["none", "memory", "memory and disk"])
async def test_a_malformed_shard_raises_the_same_error_with_and_without_a_cache(
    local_shards: tuple[list[str], Path], tmp_path: Path, cache: str
) -> None:
    paths, index = local_shards
    known = None
    if cache != "none":
        disk: dict[str, Any] = {"disk_dir": tmp_path / "disk", "disk_bytes": DATASET}
        known = KnownFutureCache(DATASET, **(disk if "disk" in cache else {}))
    source = TarShards(paths, index_dir=index, cache=known)
    shard = 3
    os.truncate(paths[shard], len(BLOBS[shard]) // 2)  # shorter than its index says
    batch = list(range(shard * PER_SHARD, (shard + 1) * PER_SHARD))
    with pytest.raises(MalformedShardError) as info:
        await source.get_samples(batch)
    assert type(info.value) is MalformedShardError
    assert str(info.value).startswith(f"shard {paths[shard]!r} is shorter than its index says")
    with pytest.raises(MalformedShardError):
        await source.get_sample(batch[-1])
    assert [s["bin"] for s in await source.get_samples([0, 1])] == WANT[:2]  # others still read


async def _read_steps(source: TarShards[Any], sampler: Any, steps: range) -> list[list[bytes]]:
    got = []
    for g in steps:
        batch = await source.get_samples(plan_batch(sampler, SEED, g).indices.tolist())
        got.append([sample["bin"] for sample in batch])
    return got


@pytest.mark.anyio
async def test_a_disk_write_error_degrades_the_cache_to_memory_only_and_the_batches_go_on(
    local_shards: tuple[list[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths, index = local_shards
    disk = tmp_path / "disk"
    cache = KnownFutureCache(DATASET // 4, disk_dir=disk, disk_bytes=DATASET, lookahead_steps=4)
    source = TarShards(paths, index_dir=index, cache=cache)
    syncs: list[int] = []

    def full(fd: int) -> None:  # the disk is full: the entry cannot be made durable
        syncs.append(fd)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    sampler = samplers()["global"]
    steps = sampler.steps_per_epoch
    await anyio.to_thread.run_sync(source.plan_reads, sampler, SEED, 0, 2 * steps)
    with pytest.warns(RuntimeWarning, match=r"disk tier .* failed .*memory only") as caught:
        got = await _read_steps(source, sampler, range(2 * steps))
    assert got == expected_batches(WANT, sampler, range(2 * steps))
    assert len(caught) == 1
    assert str(caught[0].message).endswith(
        f"{str(disk)!r} failed ([Errno {errno.ENOSPC}] {os.strerror(errno.ENOSPC)}); "
        "the cache goes on in memory only"
    )
    stats = cache.statistics()
    assert len(syncs) == 1  # one write tried; none after it
    assert (stats.disk_errors, stats.disk_degraded) == (1, True)
    assert (stats.disk_bytes, stats.disk_hits) == (0, 0)  # the bytes unbooked
    assert stats.current_bytes > 0  # the memory tier goes on
    assert stats.hits + stats.misses == 2 * N
    files = sorted(p.name for p in disk.rglob("*") if p.is_file())
    assert files == [".aioloader-cache"]  # the temporary file removed, nothing else written
    assert len(paths) == SHARDS


def test_a_disk_write_error_of_an_offer_degrades_too(
    local_shards: tuple[list[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An offer (what indexing read, given to the cache) that memory cannot hold goes to
    disk: an I/O error there is refused, warned of and counted in the same way."""
    paths, index = local_shards
    disk = tmp_path / "disk"
    cache = KnownFutureCache(1, disk_dir=disk, disk_bytes=DATASET)
    TarShards(paths, index_dir=index, cache=cache)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.warns(RuntimeWarning, match="memory only"):
        assert not cache.offer(0, WANT[0])
    assert not cache.offer(1, WANT[1])  # degraded: not tried again, no second warning
    stats = cache.statistics()
    assert (stats.disk_errors, stats.disk_degraded, stats.disk_bytes) == (1, True, 0)
    assert sorted(p.name for p in disk.rglob("*") if p.is_file()) == [".aioloader-cache"]


BEHIND: contextvars.ContextVar[bool] = contextvars.ContextVar("BEHIND", default=False)
"""True in the read-ahead server's context (its fetches run there, not in a step's)."""


class FailingShards(TarShards[Any]):
    """``TarShards`` whose reads of shard ``bad`` fail, the first ``times`` of them; with
    ``behind_only``, only reads made by the read-ahead server."""

    def __init__(
        self, *args: Any, bad: str, times: int, behind_only: bool = False, **kwargs: Any
    ) -> None:
        self.bad, self.left, self.failed, self.behind_only = bad, times, 0, behind_only
        super().__init__(*args, **kwargs)

    async def read_range(self, key: str, start: int, end: int) -> bytes:
        if key == self.bad and self.left > 0 and (not self.behind_only or BEHIND.get()):
            self.left -= 1
            self.failed += 1
            raise OSError(f"the store failed a read of {key}")
        return await super().read_range(key, start, end)


def _first_group_after(sampler: Any, steps: int) -> tuple[int, int]:
    """The first step that reads a shard none of steps ``0 .. steps-1`` read, and that shard."""
    seen: set[int] = set()
    for g in range(sampler.steps_per_epoch):
        shards = {i // PER_SHARD for i in plan_batch(sampler, SEED, g).indices.tolist()}
        if g >= steps and shards - seen:
            return g, min(shards - seen)
        seen |= shards
    raise AssertionError("an epoch reads no shard past its first steps")


async def _served_steps(source: TarShards[Any], sampler: Any, steps: range) -> list[list[bytes]]:
    """The steps' batches, read as the loader reads them: planned from the first, with the
    source's server running (a step's error is raised as itself, not in the group's)."""
    got: list[list[bytes]] = []
    failure: Exception | None = None
    source.plan_reads(sampler, SEED, steps.start)

    async def serve(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        BEHIND.set(True)
        await source.serve_reads(task_status=task_status)

    async with anyio.create_task_group() as behind:
        await behind.start(serve)
        try:
            got = await _read_steps(source, sampler, steps)
        except Exception as error:
            failure = error
        finally:
            behind.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return got


def _failing(
    local_shards: tuple[list[str], Path], times: int, behind_only: bool
) -> tuple[FailingShards, Any, int]:
    """A block shuffle over shards whose first read-ahead past step 0 (shard ``bad``, first
    read by step ``first``) fails ``times`` times: the source, the sampler and ``first``."""
    paths, index = local_shards
    sampler = samplers()["block"]
    first, shard = _first_group_after(sampler, 1)  # read ahead behind step 0's reads
    cache = KnownFutureCache(DATASET // 2, lookahead_steps=first + 2)
    bad = paths[shard]
    source = FailingShards(
        paths, index_dir=index, cache=cache, bad=bad, times=times, behind_only=behind_only
    )
    return source, sampler, first


@pytest.mark.anyio
async def test_a_failed_read_ahead_behind_the_steps_is_read_again_by_the_step_that_needs_it(
    local_shards: tuple[list[str], Path],
) -> None:
    source, sampler, first = _failing(local_shards, 1, behind_only=True)
    steps = range(first + 4)
    with anyio.fail_after(60):
        got = await _served_steps(source, sampler, steps)
    assert got == expected_batches(WANT, sampler, steps)
    assert source.failed == 1


@pytest.mark.anyio
async def test_a_read_that_keeps_failing_fails_only_the_step_that_needs_it(
    local_shards: tuple[list[str], Path],
) -> None:
    source, sampler, first = _failing(local_shards, 10**9, behind_only=False)
    with anyio.fail_after(60):
        got = await _served_steps(source, sampler, range(first))  # before it: unharmed
        assert got == expected_batches(WANT, sampler, range(first))
        with pytest.raises(OSError, match="the store failed a read of") as info:
            await _served_steps(source, sampler, range(first, first + 1))
    assert type(info.value) is OSError
    assert source.failed >= 2  # read ahead behind, then by the step itself
