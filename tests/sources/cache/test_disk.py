"""The disk tier: atomic, checked files that survive a SIGKILL and a restart, within the bound."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from aioloader.sources._tar import TarShards
from aioloader.sources.cache import KnownFutureCache
from aioloader.sources.cache._disk import DiskTier
from aioloader.sources.cache._disk_folder import MARKER, entry_name, shard_folder, temp_for
from tests.sources.cache.helpers import (
    SHARDS,
    LoggedShards,
    expected_batches,
    run_epochs,
    samplers,
    shard_blobs,
    want_of,
)

ROOT = Path(__file__).resolve().parents[3]
BLOBS = shard_blobs()
WANT = want_of(BLOBS)
DATASET = sum(len(blob) for blob in BLOBS)


def _files(directory: Path) -> list[Path]:
    """The tier's entry and temporary files (its marker aside)."""
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MARKER)


def test_entries_are_written_whole_and_checked_when_read(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path, 100, "belady")
    path = tier.path_for(0, "a.tar", "v1", 10, 15, b"hello")
    assert path == tmp_path / shard_folder("a.tar", "v1") / entry_name(10, 15, b"hello")
    tier.write_now(path, b"hello")
    assert _files(tmp_path) == [path]  # no temporary file left
    assert DiskTier.read_now(path) == b"hello"
    path.write_bytes(b"hellp")  # same size, other bytes: the CRC-32 in the name catches it
    assert DiskTier.read_now(path) is None
    assert not path.exists()  # a damaged entry is deleted, never served
    assert DiskTier.read_now(path) is None  # gone: a miss


def test_open_keeps_whole_entries_of_current_shards_within_the_bound(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path, 100, "belady")
    spans = {("a.tar", 0, 5): 0, ("a.tar", 5, 10): 1, ("a.tar", 10, 20): 2}
    for (key, start, end), unit in spans.items():
        data = bytes(range(start, end))
        tier.write_now(tier.path_for(unit, key, "v1", start, end, data), data)
    folder = tmp_path / shard_folder("a.tar", "v1")
    _dead_writers_temp(folder / "0-5-00000000").write_bytes(b"part")  # cut by a crash
    (folder / "20-30-00000000").write_bytes(b"short")  # size does not match its name
    old = tmp_path / shard_folder("a.tar", "v0")  # the shard changed since
    old.mkdir()
    (old / "0-5-00000000").write_bytes(b"12345")

    def locate(key: str, start: int, end: int) -> int | None:
        return spans.get((key, start, end))

    again = DiskTier(tmp_path, 12, "belady")  # a smaller bound than last time
    again.open({shard_folder("a.tar", "v1"): "a.tar"}, locate)
    assert again.sizes == {0: 5, 1: 5}  # the third would exceed 12 bytes: deleted
    assert again.bytes == 10
    assert [p.name for p in _files(tmp_path)] == sorted(
        entry_name(s, e, bytes(range(s, e))) for s, e in ((0, 5), (5, 10))
    )


def _dead_pid() -> int:
    """The pid of a process of this host that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _dead_writers_temp(path: Path) -> Path:
    """``path``'s temporary name as a writer of this host that has died would have made it."""
    return temp_for(path, _dead_pid())


_CHILD = """
import os, sys, threading
from pathlib import Path
sys.path.insert(0, {root!r})
from aioloader.sources.cache import KnownFutureCache
from tests.sources.cache.helpers import LoggedShards, run_epochs, samplers

writes = 0
real_fsync = os.fsync

def fsync(fd):
    global writes
    writes += 1
    if writes == {kill_at}:  # mid-write: the temporary file holds data, not yet renamed
        print("ready", flush=True)
        threading.Event().wait()
    real_fsync(fd)

os.fsync = fsync
paths = [str(p) for p in sorted(Path({shards!r}).glob("*.tar"))]
cache = KnownFutureCache({memory}, disk_dir={disk!r}, disk_bytes={bound}, lookahead_steps=4)
source = LoggedShards(paths, index_dir={index!r}, cache=cache)
run_epochs(source, samplers()["global"], 2)
print("finished", flush=True)
"""


def test_a_sigkill_mid_write_leaves_no_partial_entry_that_is_ever_read(tmp_path: Path) -> None:
    shards, index, disk = tmp_path / "shards", tmp_path / "index", tmp_path / "disk"
    shards.mkdir()
    for s, blob in enumerate(BLOBS):
        (shards / f"shard-{s:02d}.tar").write_bytes(blob)
    paths = [str(p) for p in sorted(shards.glob("*.tar"))]
    TarShards(paths, index_dir=index)  # saved indices: the child's cache starts empty
    bound = DATASET // 3
    script = _CHILD.format(
        root=str(ROOT),
        kill_at=200,
        shards=str(shards),
        memory=DATASET // 10,
        disk=str(disk),
        bound=bound,
        index=str(index),
    )
    with subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None
            ready, _, _ = select.select([child.stdout], [], [], 120)
            assert ready, "the child never reached its 200th fsync"
            assert child.stdout.readline().strip() == "ready"
            on_disk = _files(disk)
            partial = [p for p in on_disk if ".tmp" in p.name]
            assert len(partial) == 1  # killed while writing this one
            assert sum(p.stat().st_size for p in on_disk) <= bound
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
    assert child.returncode == -signal.SIGKILL
    cache = KnownFutureCache(DATASET // 10, disk_dir=disk, disk_bytes=bound, lookahead_steps=4)
    source = LoggedShards(paths, index_dir=index, cache=cache)
    assert not [p for p in _files(disk) if ".tmp" in p.name]  # deleted when the tier opened
    found = cache.statistics()
    assert found.disk_bytes == sum(p.stat().st_size for p in _files(disk)) > 0
    sampler = samplers()["global"]
    got = run_epochs(source, sampler, 2)
    assert got.batches == expected_batches(WANT, sampler, range(2 * sampler.steps_per_epoch))
    stats = cache.statistics()
    assert stats.disk_hits > 0  # the entries the killed run left were used
    assert stats.disk_peak_bytes <= bound
    assert sum(p.stat().st_size for p in _files(disk)) <= bound


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_entry_is_a_miss_never_data(tmp_path: Path, damage: str) -> None:
    shards, disk = tmp_path / "shards", tmp_path / "disk"
    shards.mkdir()
    for s, blob in enumerate(BLOBS):
        (shards / f"shard-{s:02d}.tar").write_bytes(blob)
    paths = [str(p) for p in sorted(shards.glob("*.tar"))]
    first = KnownFutureCache(1, disk_dir=disk, disk_bytes=2 * DATASET, lookahead_steps=4)
    run_epochs(
        LoggedShards(paths, index_dir=tmp_path / "index", cache=first), samplers()["block"], 1
    )
    entries = _files(disk)
    assert len(entries) == len(WANT)
    damaged_bytes = 0
    for path in entries[::7]:
        data = path.read_bytes()
        damaged_bytes += len(data)
        path.write_bytes(data[:-1] if damage == "truncate" else bytes([data[0] ^ 1]) + data[1:])
    cache = KnownFutureCache(1, disk_dir=disk, disk_bytes=2 * DATASET, lookahead_steps=4)
    source: Any = LoggedShards(paths, index_dir=tmp_path / "index", cache=cache)
    sampler = samplers()["block"]
    got = run_epochs(source, sampler, 1)
    assert got.batches == expected_batches(WANT, sampler, range(sampler.steps_per_epoch))
    damaged = len(entries[::7])
    stats = cache.statistics()
    assert stats.disk_hits == len(WANT) - damaged
    assert stats.hits + stats.misses == len(WANT)
    # read again from the shards, each once: a miss (flipped, found when read), or read
    # ahead unless its step came first (truncated, dropped when the tier opened)
    assert stats.misses + stats.prefetch_hits == damaged
    assert stats.prefetch_hits == (0 if damage == "flip" else damaged - stats.misses)
    assert stats.bytes_fetched - stats.bytes_unused == damaged_bytes
    assert 0 < got.requests[0] <= damaged
    assert len(paths) == SHARDS
