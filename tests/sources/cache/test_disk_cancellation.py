"""Cancelling batch reads at any point, while the disk tier reads and writes its files,
leaves no file open, no temporary file behind, and a cache that reads right after."""

from __future__ import annotations

import gc
import os
import warnings
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from aioloader.core import plan_batch
from aioloader.sources._tar import TarShards
from aioloader.sources.cache import KnownFutureCache
from tests.sources.cache.helpers import (
    SEED,
    LoggedShards,
    N,
    expected_batches,
    run_epochs,
    samplers,
    shard_blobs,
    want_of,
)

BLOBS = shard_blobs()
WANT = want_of(BLOBS)
DATASET = sum(len(blob) for blob in BLOBS)


def _open_under(folder: Path) -> list[str]:
    """The files under ``folder`` that this process holds open."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed meanwhile
            continue
        if target.startswith(str(folder)):
            found.append(target)
    return found


def _entries(disk: Path) -> list[Path]:
    return sorted(p for p in disk.rglob("*") if p.is_file() and p.name[0].isdigit())


@pytest.mark.anyio
async def test_cancelling_reads_at_any_point_leaves_no_disk_file_open_or_half_written(
    local_shards: tuple[list[str], Path], tmp_path: Path
) -> None:
    paths, index = local_shards
    disk = tmp_path / "disk"
    options: dict[str, Any] = {"disk_dir": disk, "disk_bytes": 2 * DATASET, "lookahead_steps": 4}
    block = samplers()["block"]
    first = LoggedShards(paths, index_dir=index, cache=KnownFutureCache(1, **options))
    await anyio.to_thread.run_sync(run_epochs, first, block, 1)  # every sample on disk
    for entry in _entries(disk)[::2]:
        entry.unlink()  # half of them gone: batches read from disk and write to it
    cache = KnownFutureCache(1, **options)
    source = TarShards(paths, index_dir=index, cache=cache)
    sampler = samplers()["global"]
    steps = sampler.steps_per_epoch
    await anyio.to_thread.run_sync(source.plan_reads, sampler, SEED, 0, steps)
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    cancelled = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for g in range(steps):  # step g is cancelled after g % 8 checkpoints (0: before)
            indices = plan_batch(sampler, SEED, g).indices.tolist()
            with anyio.CancelScope() as scope:
                if g % 8 == 0:
                    scope.cancel()

                async def cancel(scope: anyio.CancelScope = scope, after: int = g % 8) -> None:
                    for _ in range(after):
                        await anyio.lowlevel.checkpoint()
                    scope.cancel()

                async with anyio.create_task_group() as group:
                    group.start_soon(cancel)
                    await source.get_samples(indices)
                    group.cancel_scope.cancel()
            cancelled += scope.cancelled_caught
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert _open_under(disk) == []
    assert len(os.listdir("/proc/self/fd")) == before
    assert cancelled >= steps // 8  # those cancelled before they start, and others
    assert [p for p in disk.rglob("*") if ".tmp" in p.name] == []
    stats = cache.statistics()
    assert stats.disk_bytes == sum(p.stat().st_size for p in _entries(disk))
    got = []  # the same steps again, read to the end: right, from whatever is on disk
    for g in range(steps):
        batch = await source.get_samples(plan_batch(sampler, SEED, g).indices.tolist())
        got.append([sample["bin"] for sample in batch])
    assert got == expected_batches(WANT, sampler, range(steps))
    assert len(source) == N
