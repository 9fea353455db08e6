"""The disk tier owns only what it made; processes share its folder; old entries make room.

Temporary names are built here as the disk tier documents them,
``<entry>.tmp-<host>-<pid>-<random>`` (host: CRC-32 of the host name), so that the tests
need nothing private of the tier.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aioloader.core import ShuffledSampler
from aioloader.sources._tar import TarShards
from aioloader.sources.cache import KnownFutureCache
from tests.sources.cache.helpers import (
    PER_SHARD,
    SHARDS,
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
HOST = f"{zlib.crc32(socket.gethostname().encode()):08x}"
OTHER_HOST = f"{(int(HOST, 16) + 1) % (1 << 32):08x}"
DAY = 24 * 3600


def _tree(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _entries(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file() and p.name[0].isdigit()]


def _temps(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if ".tmp" in p.name]


def _temp_name(entry: Path, host: str, pid: int) -> Path:
    return entry.with_name(f"{entry.name}.tmp-{host}-{pid}-0a1b2c3d")


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: no process has this pid (until the system reuses it)
    return child.pid


def _on(folder: Path) -> dict[str, Any]:
    return {"disk_dir": folder, "disk_bytes": 2 * DATASET}


BACKENDS = ["asyncio", "trio"]  # each epoch's event loop (run_epochs)


def _fill(paths: list[str], index: Path, disk: Path, backend: str = "asyncio") -> LoggedShards:
    """One epoch through a cache whose memory holds nothing: every sample ends on disk."""
    cache = KnownFutureCache(1, disk_dir=disk, disk_bytes=2 * DATASET, lookahead_steps=4)
    source = LoggedShards(paths, index_dir=index, cache=cache)
    run_epochs(source, samplers()["block"], 1, backend=backend)
    assert len(_entries(disk)) == N
    return source


# -- defect: the disk tier deleted files it did not create -------------------------------


def test_disk_dir_holding_a_users_files_is_refused_and_nothing_in_it_is_deleted(
    local_shards: tuple[list[str], Path], tmp_path: Path
) -> None:
    paths, index = local_shards
    project = tmp_path / "project"
    (project / "notes").mkdir(parents=True)
    (project / "notes" / "thesis.tex").write_text("\\section{Results}\n")
    (project / "train.py").write_text("print('training')\n")
    (project / "0-5-00000000.tmp").write_text("a user's file with a name like a cache's\n")
    before = _tree(project)
    with pytest.raises(ValueError, match=r"^disk_dir must be an empty folder") as info:
        TarShards(paths, index_dir=index, cache=KnownFutureCache(1 << 20, **_on(project)))
    message = str(info.value)
    assert f"but got {str(project)!r}, which holds 3 other entries" in message
    assert "('0-5-00000000.tmp', 'notes', 'train.py')" in message
    assert _tree(project) == before
    assert sorted(p.name for p in project.iterdir()) == ["0-5-00000000.tmp", "notes", "train.py"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_files_a_user_adds_to_the_cache_folder_are_left_alone(
    local_shards: tuple[list[str], Path], tmp_path: Path, backend: str
) -> None:
    paths, index = local_shards
    disk = tmp_path / "disk"
    _fill(paths, index, disk, backend)
    folder = _entries(disk)[0].parent
    (disk / "README.txt").write_text("what this folder is\n")
    (folder / "notes.txt").write_text("a note among the entries\n")
    lookalike = disk / "0123456789abcdef01234567"  # named like a shard's folder, not one
    lookalike.mkdir()
    (lookalike / "keep.txt").write_text("mine\n")
    ours = sum(len(data) for data in _tree(disk).values())
    cache = KnownFutureCache(1, disk_dir=disk, disk_bytes=2 * DATASET, lookahead_steps=4)
    source = LoggedShards(paths, index_dir=index, cache=cache)  # opens the tier again
    sampler = samplers()["block"]
    got = run_epochs(source, sampler, 1, backend=backend)
    assert got.batches == expected_batches(WANT, sampler, range(sampler.steps_per_epoch))
    assert (disk / "README.txt").read_text() == "what this folder is\n"
    assert (folder / "notes.txt").read_text() == "a note among the entries\n"
    assert (lookalike / "keep.txt").read_text() == "mine\n"
    assert cache.statistics().disk_hits == N
    assert got.requests == [0]
    assert sum(len(data) for data in _tree(disk).values()) == ours  # nothing added or lost


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_temporary_file_is_deleted_only_when_its_writer_is_gone(
    local_shards: tuple[list[str], Path], tmp_path: Path, backend: str
) -> None:
    paths, index = local_shards
    disk = tmp_path / "disk"
    _fill(paths, index, disk, backend)
    entry = sorted(_entries(disk))[0]
    old = time.time() - 2 * DAY
    kept = {  # (temporary file, written two days ago)
        "this process (alive)": (_temp_name(entry, HOST, os.getpid()), False),
        "another host, written just now": (_temp_name(entry, OTHER_HOST, 1), False),
    }
    gone = {
        "a dead process of this host": (_temp_name(entry, HOST, _dead_pid()), False),
        "another host, two days ago": (_temp_name(entry, OTHER_HOST, 2), True),
        "a live pid, two days ago (reused)": (_temp_name(entry, HOST, os.getppid()), True),
    }
    for path, aged in [*kept.values(), *gone.values()]:
        path.write_bytes(b"partial")
        if aged:
            os.utime(path, (old, old))
    KnownFutureCache(1, disk_dir=disk, disk_bytes=2 * DATASET).bind(
        LoggedShards(paths, index_dir=index)
    )
    assert {name: p.read_bytes() for name, (p, _) in kept.items()} == dict.fromkeys(
        kept, b"partial"
    )
    assert {name: p.exists() for name, (p, _) in gone.items()} == dict.fromkeys(gone, False)


_WRITER = """
import os, sys
final, data, host = sys.argv[1], open(sys.argv[2], "rb").read(), sys.argv[3]
temp = f"{final}.tmp-{host}-{os.getpid()}-0a1b2c3d"  # named as the disk tier names its own
fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
os.write(fd, data[: len(data) // 2])
print("ready", flush=True)
sys.stdin.readline()  # the other process opens the folder meanwhile
os.write(fd, data[len(data) // 2 :])
os.fsync(fd)
os.close(fd)
os.replace(temp, final)
print("done", flush=True)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_processes_share_one_folder_and_a_live_writers_file_survives(
    local_shards: tuple[list[str], Path], tmp_path: Path, backend: str
) -> None:
    paths, index = local_shards
    disk = tmp_path / "disk"
    sampler = samplers()["block"]
    steps = sampler.steps_per_epoch
    first = _fill(paths, index, disk, backend)  # one process: every sample on disk
    entry = min(_entries(disk), key=lambda p: (p.parent.name, int(p.name.split("-")[0])))
    saved = tmp_path / "entry.bin"
    saved.write_bytes(entry.read_bytes())
    entry.unlink()  # another process is writing this entry again, as it would
    with subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_WRITER), str(entry), str(saved), HOST],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as writer:
        assert writer.stdin is not None
        assert writer.stdout is not None
        ready, _, _ = select.select([writer.stdout], [], [], 60)
        assert ready
        assert writer.stdout.readline() == "ready\n"
        temp = _temp_name(entry, HOST, writer.pid)
        # a second cache (as in another process) opens the folder while the writer writes
        second = KnownFutureCache(1, disk_dir=disk, disk_bytes=2 * DATASET, lookahead_steps=4)
        source = LoggedShards(paths, index_dir=index, cache=second)
        assert temp.read_bytes() == saved.read_bytes()[: saved.stat().st_size // 2]
        writer.stdin.write("go\n")
        writer.stdin.flush()
        assert writer.stdout.readline() == "done\n"
    assert writer.returncode == 0
    assert entry.read_bytes() == saved.read_bytes()
    got = run_epochs(source, sampler, 1, backend=backend)
    assert got.batches == expected_batches(WANT, sampler, range(steps))
    stats = second.statistics()
    assert (stats.misses, stats.disk_hits) == (1, N - 1)  # the entry being written: a miss
    # the first cache, still open, reads its entries, the rewritten one included
    again = run_epochs(first, sampler, 1, steps, backend=backend)
    assert again.batches == expected_batches(WANT, sampler, range(steps, 2 * steps))
    assert again.requests == [0]
    assert _temps(disk) == []
    assert len(_entries(disk)) == N


# -- defect: entries left by an earlier run held the bound -------------------------------


class _Subset:
    """A shuffled sampler over some samples of the dataset (a run's subset)."""

    def __init__(self, indices: range, batch: int) -> None:
        self._indices = np.asarray(indices, np.int64)
        self._inner = ShuffledSampler(len(indices), batch)

    @property
    def steps_per_epoch(self) -> int:
        return self._inner.steps_per_epoch

    def indices(self, seed: int, epoch: int, step: int) -> Any:
        return self._indices[self._inner.indices(seed, epoch, step)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_entries_of_an_earlier_run_make_room_for_what_a_new_plan_needs(
    local_shards: tuple[list[str], Path], tmp_path: Path, backend: str
) -> None:
    paths, index = local_shards
    plain = LoggedShards(paths, index_dir=index)
    size = [end - start for _, start, end in map(plain.span_of, range(N))]
    half = SHARDS // 2 * PER_SHARD
    first_half, second_half = range(half), range(half, N)
    halves = sorted((first_half, second_half), key=lambda r: sum(size[i] for i in r))
    b, a = halves  # run 1 reads the larger half, run 2 the smaller: it fits in the bound
    bytes_a, bytes_b = sum(size[i] for i in a), sum(size[i] for i in b)
    disk = tmp_path / "disk"
    options: dict[str, Any] = {"disk_dir": disk, "disk_bytes": bytes_a, "lookahead_steps": 4}
    first = KnownFutureCache(1, **options)
    run_epochs(
        LoggedShards(paths, index_dir=index, cache=first), _Subset(a, 16), 1, backend=backend
    )
    assert first.statistics().disk_bytes == bytes_a  # the bound is full
    # run 2: another subset; its plan (two epochs, 48 steps) is one window, known before its
    # first read (with later windows computed in threads as reads go on, whether a sample
    # read in epoch 1 is known to be needed in epoch 2 when it arrives is a race)
    second = KnownFutureCache(1, window_steps=64, horizon_windows=1, **options)
    source = LoggedShards(paths, index_dir=index, cache=second)
    assert second.statistics().disk_bytes == bytes_a
    sampler = _Subset(b, 16)
    got = run_epochs(source, sampler, 2, backend=backend)
    assert got.batches == expected_batches(WANT, sampler, range(2 * sampler.steps_per_epoch))
    stats = second.statistics()
    # epoch 1 fetches the subset once, and each sample goes to disk, in place of entries
    # of run 1 (lowest first among equals): epoch 2 reads it all from disk
    assert (stats.misses, stats.disk_hits, stats.hits) == (len(b), len(b), len(b))
    assert got.requests[1] == 0
    assert stats.bytes_used == bytes_b
    evicted, k = 0, 0
    while evicted < bytes_b:  # the fewest of run 1's entries, lowest index first
        evicted += size[a[k]]
        k += 1
    assert stats.disk_bytes_evicted == evicted
    assert stats.disk_bytes == bytes_a - evicted + bytes_b
    assert sum(p.stat().st_size for p in _entries(disk)) == stats.disk_bytes
