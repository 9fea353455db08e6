"""TarShardWriter: WebDataset shards committed whole, listed in a manifest, read back exactly."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import obstore
import pytest

from aioloader.sinks import (
    MANIFEST_NAME,
    FailureRecord,
    LocalDestination,
    Manifest,
    ResumeMismatchError,
    StoreDestination,
    TarShardWriter,
    WriterConflictError,
    open_shards,
    read_failures,
    read_manifest,
)
from aioloader.sinks._destination import host_name
from aioloader.sinks._lease import LEASE_NAME
from tests._support.s3 import S3Info
from tests._support.storm import cancel_points, cancellers, no_file_left_open

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


def _fields(position: int, size: int = 10) -> dict[str, bytes]:
    return {"bin": bytes([position % 251]) * size, "json": json.dumps({"p": position}).encode()}


async def _write(writer: TarShardWriter, positions: range, *, size: int = 10) -> None:
    for position in positions:
        if position % 5 == 3:
            writer.record_failure(FailureRecord(position, "status", "HTTP 404", f"{position:06d}"))
        else:
            await writer.write(f"{position:06d}", _fields(position, size), position=position)


def _expected_keys(positions: range) -> list[str]:
    return [f"{p:06d}" for p in positions if p % 5 != 3]


async def test_shards_roll_over_by_sample_count_and_read_back_exactly(tmp_path: Path) -> None:
    async with TarShardWriter(tmp_path, max_samples=4) as writer:
        await _write(writer, range(12))
    manifest = read_manifest(tmp_path)
    assert [(r.name, r.samples, r.failed, r.first, r.end) for r in manifest.shards] == [
        ("shard-000000.tar", 4, 1, 0, 5),
        ("shard-000001.tar", 4, 1, 5, 10),
        ("shard-000002.tar", 2, 0, 10, 12),
    ]
    for record in manifest.shards:
        data = (tmp_path / record.name).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (record.bytes, record.sha256)
    shards = open_shards(tmp_path)
    samples = [await shards.get_sample(i) for i in range(len(shards))]
    assert [s["__key__"] for s in samples] == _expected_keys(range(12))
    assert all(s["bin"] == _fields(int(s["__key__"]))["bin"] for s in samples)
    assert [(f.position, f.reason) for f in read_failures(tmp_path)] == [
        (3, "status"),
        (8, "status"),
    ]


async def test_the_layout_is_webdataset_and_the_bytes_are_reproducible(tmp_path: Path) -> None:
    for run in ("a", "b"):
        async with TarShardWriter(tmp_path / run, max_samples=100) as writer:
            await _write(writer, range(4))
    first, second = read_manifest(tmp_path / "a"), read_manifest(tmp_path / "b")
    assert first.shards[0].sha256 == second.shards[0].sha256
    with tarfile.open(tmp_path / "a" / "shard-000000.tar") as archive:
        members = archive.getmembers()
        assert [m.name for m in members] == [
            "000000.bin",
            "000000.json",
            "000001.bin",
            "000001.json",
            "000002.bin",
            "000002.json",
        ]
        assert {(m.mode, m.mtime, m.uid, m.type) for m in members} == {
            (0o644, 0, 0, tarfile.REGTYPE)
        }
        extracted = archive.extractfile("000002.json")
        assert extracted is not None
        assert extracted.read() == b'{"p": 2}'


def _tar_file_sizes(folder: Path) -> list[int]:
    return [path.stat().st_size for path in folder.iterdir() if ".tar" in path.name]


async def test_a_shard_is_written_off_the_loop_in_pieces_and_reads_back_whole(
    tmp_path: Path,
) -> None:
    writer = TarShardWriter(tmp_path, max_samples=100)
    async with writer:
        await _write(writer, range(2), size=400_000)  # 800 KB gathered: nothing written yet
        assert _tar_file_sizes(tmp_path) == []
        await _write(writer, range(2, 10), size=400_000)  # > 1 MiB: pieces written out
        (written,) = _tar_file_sizes(tmp_path)
        assert 1 << 20 <= written < writer.statistics().pending_bytes
    (record,) = read_manifest(tmp_path).shards
    data = (tmp_path / record.name).read_bytes()
    assert (len(data), hashlib.sha256(data).hexdigest()) == (record.bytes, record.sha256)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        members = {m.name: archive.extractfile(m).read() for m in archive}  # type: ignore[union-attr]
    for position in (p for p in range(10) if p % 5 != 3):
        expected = _fields(position, 400_000)
        assert members[f"{position:06d}.bin"] == expected["bin"]
        assert members[f"{position:06d}.json"] == expected["json"]


async def test_shards_roll_over_by_bytes(tmp_path: Path) -> None:
    # each sample: 2 headers (1024) + 2000 data padded to 2048 + json (512) = 3584 bytes
    async with TarShardWriter(tmp_path, max_samples=1000, max_bytes=8200) as writer:
        for position in range(5):
            await writer.write(f"{position:06d}", _fields(position, 2000), position=position)
    manifest = read_manifest(tmp_path)
    assert [r.samples for r in manifest.shards] == [2, 2, 1]
    assert [r.bytes for r in manifest.shards] == [2 * 3584 + 1024, 2 * 3584 + 1024, 3584 + 1024]


async def test_a_sample_larger_than_max_bytes_gets_a_shard_alone(tmp_path: Path) -> None:
    async with TarShardWriter(tmp_path, max_bytes=4096) as writer:
        await writer.write("a", {"bin": bytes(10)})
        await writer.write("b", {"bin": bytes(10_000)})
        await writer.write("c", {"bin": bytes(10)})
    assert [r.samples for r in read_manifest(tmp_path).shards] == [1, 1, 1]


async def test_positions_must_come_in_order_without_gaps(tmp_path: Path) -> None:
    writer = TarShardWriter(tmp_path, start_position=10)
    with pytest.raises(
        ValueError, match="position must be the next input position, 10, but got 11"
    ):
        await writer.write("a", {"bin": b"x"}, position=11)
    await writer.write("a", {"bin": b"x"}, position=10)
    with pytest.raises(ValueError, match=r"position must be an int \(earlier records carry one\)"):
        await writer.write("b", {"bin": b"x"})
    assert writer.next_position == 11
    writer.abort()
    assert not (tmp_path / "shard-000000.tar").exists()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("key", "fields", "error", "message"),
    [
        ("a.b", {"bin": b""}, ValueError, "key must be a relative name whose last component"),
        ("/abs", {"bin": b""}, ValueError, "key must be a relative name"),
        ("", {"bin": b""}, TypeError, "key must be a non-empty str"),
        ("k", {}, ValueError, "fields of sample 'k' must be a non-empty mapping"),
        ("k", {"a/b": b""}, ValueError, "field names must be non-empty strs without '/'"),
        ("k", {"txt": "text"}, TypeError, "field 'txt' of sample 'k' must be bytes but got a str"),
    ],
)
async def test_bad_samples_are_refused_by_name(
    tmp_path: Path, key: str, fields: dict[str, Any], error: type[Exception], message: str
) -> None:
    writer = TarShardWriter(tmp_path)
    with pytest.raises(error, match=message):
        await writer.write(key, fields)
    writer.abort()


def test_bad_arguments_name_the_rule(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_samples must be >= 1 but got 0"):
        TarShardWriter(tmp_path, max_samples=0)
    with pytest.raises(ValueError, match="name_pattern must format one shard number"):
        TarShardWriter(tmp_path, name_pattern="shard-{name}.tar")
    with pytest.raises(ValueError, match="name_pattern must give each shard number its own"):
        TarShardWriter(tmp_path, name_pattern="shard.tar")
    with pytest.raises(ValueError, match="part_size must be >= 5 MiB"):
        TarShardWriter("prefix/", store=object(), part_size=1024)
    with pytest.raises(ValueError, match=r"^start_position must be an integer >= 0 but got -1$"):
        TarShardWriter(tmp_path, start_position=-1)
    with pytest.raises(
        TypeError, match=r"^start_position must be an integer >= 0 but got a bool \(True\)$"
    ):
        TarShardWriter(tmp_path, start_position=True)
    assert os.listdir(tmp_path) == []


async def test_a_position_must_be_an_int_or_none_not_a_bool(tmp_path: Path) -> None:
    writer = TarShardWriter(tmp_path)
    with pytest.raises(TypeError, match=r"^position must be an int or None but got bool \(True\)$"):
        await writer.write("a", {"bin": b"x"}, position=True)
    with pytest.raises(TypeError, match=r"^position must be an int or None but got str \('0'\)$"):
        writer.record_failure(FailureRecord("0", "status", "HTTP 404"))  # type: ignore[arg-type]
    assert writer.next_position == 0
    writer.abort()


async def test_an_existing_manifest_is_refused_unless_resuming_with_the_same_settings(
    tmp_path: Path,
) -> None:
    settings = {"image.size": 64, "content_types": ["image/"]}
    async with TarShardWriter(tmp_path, meta={"input": "a.txt"}, settings=settings) as writer:
        await _write(writer, range(3))
    with pytest.raises(FileExistsError, match="already holds a manifest"):
        TarShardWriter(tmp_path)
    changed = {"image.size": 32, "content_types": ["image/"], "key_width": 9}
    with pytest.raises(ResumeMismatchError) as refused:
        TarShardWriter(tmp_path, resume=True, settings=changed)
    assert str(refused.value) == (
        f"cannot resume from {tmp_path / MANIFEST_NAME}: settings that decide the output "
        "changed: image.size was 64 and is now 32; key_width was unset and is now 9 (resume "
        "with the settings it was written with, or write to a new output)"
    )
    resumed = TarShardWriter(tmp_path, resume=True, meta={"input": "b.txt"}, settings=settings)
    assert (resumed.next_position, len(resumed.manifest.shards)) == (3, 1)
    assert dict(resumed.manifest.meta) == {"input": "a.txt"}  # facts of the first run kept
    resumed.abort()


async def test_a_version_1_manifest_is_refused_for_resume_but_stays_readable(
    tmp_path: Path,
) -> None:
    async with TarShardWriter(tmp_path) as writer:
        await _write(writer, range(2))
    data = json.loads((tmp_path / MANIFEST_NAME).read_text())
    data["version"] = 1
    del data["settings"], data["input_end"]
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(ResumeMismatchError, match="it is a version 1 manifest, written before"):
        TarShardWriter(tmp_path, resume=True)
    assert len(open_shards(tmp_path)) == 2
    assert not (tmp_path / LEASE_NAME).exists()  # the refused writer gave its lease back


async def test_a_second_writer_on_one_folder_fails_naming_the_first(tmp_path: Path) -> None:
    first = TarShardWriter(tmp_path, max_samples=2)
    await _write(first, range(3))
    with pytest.raises(WriterConflictError) as refused:
        TarShardWriter(tmp_path, resume=True)
    lease = json.loads((tmp_path / LEASE_NAME).read_text())
    assert (lease["host"], lease["pid"]) == (host_name(), os.getpid())
    assert f"names holder {lease['holder']} on host {host_name()} (pid {os.getpid()})" in str(
        refused.value
    )
    await first.close()
    assert not (tmp_path / LEASE_NAME).exists()
    second = TarShardWriter(tmp_path, resume=True, max_samples=2)
    assert second.next_position == 3
    second.abort()


async def test_a_manifest_changed_under_a_writer_stops_it_loudly(tmp_path: Path) -> None:
    writer = TarShardWriter(tmp_path, max_samples=2)
    await _write(writer, range(2))
    (tmp_path / MANIFEST_NAME).write_text((tmp_path / MANIFEST_NAME).read_text() + " ")
    with pytest.raises(WriterConflictError, match=r"another writer changed .*manifest\.json"):
        await _write(writer, range(2, 5))
    assert [r.end for r in read_manifest(tmp_path).shards] == [2]
    writer.abort()


def test_partials_of_another_host_are_left_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    mine = tmp_path / f".shard-000000.tar.partial-{host_name()}-{int(dead.stdout)}"
    theirs = tmp_path / f".shard-000000.tar.partial-other.host-{int(dead.stdout)}"
    for path in (mine, theirs):
        path.write_bytes(b"half")
    folder = LocalDestination(tmp_path)
    with caplog.at_level("WARNING", logger="aioloader.sinks"):
        assert folder.clean_partials() == 1
    assert (mine.exists(), theirs.exists()) == (False, True)
    assert folder.kept_partials == (theirs.name,)
    assert f"left 1 partial file(s) of other hosts in {tmp_path}" in caplog.text


class _CrashError(Exception):
    pass


class _CrashErroringFolder(LocalDestination):
    """A folder whose writes fail at call number ``crash_at`` (a process killed right there)."""

    def __init__(self, folder: Path, crash_at: int) -> None:
        super().__init__(folder)
        self.calls = 0
        self.crash_at = crash_at

    def _step(self) -> None:
        self.calls += 1
        if self.calls == self.crash_at:
            raise _CrashError(f"crash at step {self.calls}")

    def commit_spool(self, name: str, spool: Any, size: int) -> None:
        self._step()
        super().commit_spool(name, spool, size)

    def put_bytes(self, name: str, data: bytes) -> None:
        self._step()
        super().put_bytes(name, data)

    def put_conditional(self, name: str, data: bytes, expected: str | None) -> str:
        if name == MANIFEST_NAME:  # the lease is not part of a commit
            self._step()
        return super().put_conditional(name, data, expected)


@pytest.mark.parametrize("crash_at", range(1, 13))
async def test_a_crash_at_any_step_of_a_commit_then_a_resume_gives_every_input_once(
    tmp_path: Path, crash_at: int
) -> None:
    positions = range(23)
    writer = TarShardWriter(_CrashErroringFolder(tmp_path, crash_at), max_samples=4)
    with pytest.raises(_CrashError):
        async with writer:
            await _write(writer, positions)
    listed = read_manifest(tmp_path) if (tmp_path / MANIFEST_NAME).exists() else Manifest()
    for record in listed.shards:  # every listed shard is whole
        data = (tmp_path / record.name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == record.sha256
    resumed = TarShardWriter(tmp_path, max_samples=4, resume=True)
    assert resumed.next_position == listed.end
    async with resumed:
        await _write(resumed, range(resumed.next_position, positions.stop))
    shards = open_shards(tmp_path)
    keys = [(await shards.read_sample(i))["__key__"] for i in range(len(shards))]
    failed = [f"{f.position:06d}" for f in read_failures(tmp_path)]
    assert sorted(keys + failed) == [f"{p:06d}" for p in positions]  # once each: no gap, no dup
    assert keys == _expected_keys(positions)
    assert not [name for name in os.listdir(tmp_path) if ".partial-" in name]


async def test_the_writer_commits_to_object_storage(s3_server: S3Info, s3_prefix: str) -> None:
    store = s3_server.store()
    async with TarShardWriter(s3_prefix, store=store, max_samples=3) as writer:
        await _write(writer, range(8))
        assert writer.statistics().shards == 2
    manifest = read_manifest(s3_prefix, store)
    assert [(r.samples, r.failed, r.first, r.end) for r in manifest.shards] == [
        (3, 0, 0, 3),
        (3, 1, 3, 7),
        (1, 0, 7, 8),
    ]
    for record in manifest.shards:
        data = bytes(obstore.get(store, s3_prefix + record.name).bytes())
        assert hashlib.sha256(data).hexdigest() == record.sha256
    shards = open_shards(s3_prefix, store)
    assert [(await shards.read_sample(i))["__key__"] for i in range(len(shards))] == (
        _expected_keys(range(8))
    )


async def test_two_writers_on_one_object_store_prefix_cannot_both_write(
    s3_server: S3Info, s3_prefix: str
) -> None:
    first = TarShardWriter(s3_prefix, store=s3_server.store(), max_samples=2)
    await _write(first, range(2))
    with pytest.raises(WriterConflictError) as refused:
        TarShardWriter(s3_prefix, store=s3_server.store(), resume=True)
    lease = json.loads(bytes(obstore.get(s3_server.store(), s3_prefix + LEASE_NAME).bytes()))
    assert f"names holder {lease['holder']} on host {host_name()} (pid {os.getpid()})" in str(
        refused.value
    )
    # a writer that lost its lease (paused past the expiry) meets another's manifest
    store = s3_server.store()
    manifest = bytes(obstore.get(store, s3_prefix + MANIFEST_NAME).bytes())
    obstore.put(store, s3_prefix + MANIFEST_NAME, manifest + b" ")
    with pytest.raises(WriterConflictError, match="another writer changed s3://"):
        await _write(first, range(2, 5))
    first.abort()
    assert read_manifest(s3_prefix, store).end == 2  # its shard 1 was never listed
    with pytest.raises(FileNotFoundError):
        obstore.head(store, s3_prefix + LEASE_NAME)  # given back
    resumed = TarShardWriter(s3_prefix, store=store, resume=True, max_samples=2)
    async with resumed:
        await _write(resumed, range(2, 5))
    assert [(r.first, r.end) for r in read_manifest(s3_prefix, store).shards] == [(0, 2), (2, 5)]


async def test_a_store_without_conditional_updates_still_resumes(tmp_path: Path) -> None:
    from obstore.store import LocalStore

    store = LocalStore(tmp_path)  # has If-None-Match but no If-Match
    async with TarShardWriter("set", store=store, max_samples=2) as writer:
        await _write(writer, range(3))
    resumed = TarShardWriter("set", store=store, max_samples=2, resume=True)
    async with resumed:
        await _write(resumed, range(3, 6))
    manifest = read_manifest("set/", store)
    assert [(r.first, r.end) for r in manifest.shards] == [(0, 2), (2, 3), (3, 6)]
    assert sorted(os.listdir(tmp_path / "set"))[:2] == ["manifest.json", "shard-000000.tar"]


async def test_large_shards_go_up_in_a_multipart_upload_and_read_back_with_saved_indices(
    s3_server: S3Info, s3_prefix: str, tmp_path: Path
) -> None:
    store = s3_server.store()
    part = 5 * 1024 * 1024
    payload = [bytes([i]) * (1024 * 1024 + i) for i in range(7)]  # ~7 MiB: two parts
    writer = TarShardWriter(s3_prefix, store=store, part_size=part)
    async with writer:
        for i, data in enumerate(payload):
            await writer.write(f"s{i}", {"bin": data}, position=i)
    assert writer.statistics().multipart_uploads == 1
    assert isinstance(writer.destination, StoreDestination)
    record = read_manifest(s3_prefix, store).shards[0]
    assert record.bytes > part
    shards = open_shards(s3_prefix, store, index_dir=tmp_path / "indices")
    assert len(list((tmp_path / "indices").iterdir())) == 1  # the saved index, installed
    assert [(await shards.read_sample(i))["bin"] for i in range(7)] == payload


_KILLED_WRITER = """
import sys, anyio
sys.path.insert(0, {root!r})
from aioloader.sinks import TarShardWriter
from tests._support.s3 import S3Info
info = S3Info(**{info!r})

async def main():
    def committed(record):
        print("committed", record.name, flush=True)
    writer = TarShardWriter({prefix!r}, store=info.store(), max_samples=2,
                            part_size=5 * 1024 * 1024, on_commit=committed)
    for i in range(1000):
        await writer.write(f"k{{i:04d}}", {{"bin": bytes([i % 256]) * 3_000_000}}, position=i)

anyio.run(main)
"""


def test_a_killed_writer_leaves_no_listed_partial_shard(s3_server: S3Info, s3_prefix: str) -> None:
    info = {
        "endpoint": s3_server.endpoint,
        "bucket": s3_server.bucket,
        "access_key_id": s3_server.access_key_id,
        "secret_access_key": s3_server.secret_access_key,
    }
    script = _KILLED_WRITER.format(root=str(ROOT), info=info, prefix=s3_prefix)
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    lines = [process.stdout.readline() for _ in range(2)]
    process.send_signal(signal.SIGKILL)  # while shard 2 is being written or uploaded
    process.communicate(timeout=60)
    assert lines == ["committed shard-000000.tar\n", "committed shard-000001.tar\n"]
    store = s3_server.store()
    manifest = read_manifest(s3_prefix, store)
    assert len(manifest.shards) >= 2
    for record in manifest.shards:
        data = bytes(obstore.get(store, s3_prefix + record.name).bytes())
        assert (len(data), hashlib.sha256(data).hexdigest()) == (record.bytes, record.sha256)
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            assert len(archive.getmembers()) == record.samples == 2
    resumed = TarShardWriter(s3_prefix, store=store, max_samples=2, resume=True)
    assert resumed.next_position == 2 * len(manifest.shards)
    resumed.abort()


async def test_a_cancellation_storm_leaves_no_file_open_and_every_listed_shard_whole(
    tmp_path: Path,
) -> None:
    finished = 0
    ways = cancellers()  # a cancel scope; on asyncio also a plain task.cancel()
    with no_file_left_open(tmp_path):
        for round_, checkpoints in enumerate(cancel_points(20260521, 40)):
            folder = tmp_path / f"round-{round_}"

            async def write_shards(folder: Path = folder) -> None:
                # 300 KB samples: a piece is written out every 4th, a shard committed every 5th
                async with TarShardWriter(folder, max_samples=5) as writer:
                    await _write(writer, range(9), size=300_000)

            cancel = ways[round_ // 2 % len(ways)]
            finished += await cancel(checkpoints, write_shards)
            listed = read_manifest(folder) if (folder / MANIFEST_NAME).exists() else Manifest()
            for record in listed.shards:
                data = (folder / record.name).read_bytes()
                assert hashlib.sha256(data).hexdigest() == record.sha256
            assert [name for name in os.listdir(folder) if ".partial-" in name] == []
    assert 0 < finished < 40  # the storm's first round was cut short, its second was not
