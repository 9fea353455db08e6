"""TarShards: our own tar header parser, WebDataset grouping, saved indices, local and S3 reads."""

from __future__ import annotations

import inspect
import io
import itertools
import json
import os
import re
import tarfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import obstore
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from aioloader import MalformedShardError, ObjectNotFoundError
from aioloader._protocols import BatchedDataset
from aioloader.sources._tar import TarShards, TarShardsOptions
from aioloader.sources._tar_index import (
    StreamReader,
    _number,
    build_index,
    index_with,
    split_name,
)
from aioloader.sources.cache import KnownFutureCache
from tests._support.proxy import LoopbackProxy
from tests._support.s3 import S3Info

Members = list[tuple[str, bytes]]
FORMATS = [
    pytest.param(tarfile.USTAR_FORMAT, id="ustar"),
    pytest.param(tarfile.GNU_FORMAT, id="gnu"),
    pytest.param(tarfile.PAX_FORMAT, id="pax"),
]
LONG_DIR = "d" * 120  # beyond the 100-byte name field: ustar prefix, GNU 'L', pax 'path'


def tar_bytes(members: Members, fmt: int = tarfile.PAX_FORMAT, **options: Any) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt, **options) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def dataset(shards: int, per_shard: int, top: str = "") -> list[list[tuple[str, dict[str, bytes]]]]:
    rng = np.random.default_rng(11)
    out = []
    for s in range(shards):
        samples = []
        for i in range(per_shard):
            key = f"{top}s{s}/sample{i:03d}"
            fields = {
                "jpg": rng.integers(0, 256, int(rng.integers(0, 3000)), dtype=np.uint8).tobytes(),
                "cls": str(i % 5).encode(),
                "seg.png": rng.integers(0, 256, 700, dtype=np.uint8).tobytes(),
            }
            samples.append((key, fields))
        out.append(samples)
    return out


def members_of(samples: list[tuple[str, dict[str, bytes]]]) -> Members:
    return [(f"{key}.{field}", data) for key, fields in samples for field, data in fields.items()]


def expected(data: list[list[tuple[str, dict[str, bytes]]]]) -> list[dict[str, Any]]:
    return [{"__key__": key, **fields} for shard in data for key, fields in shard]


def write_shards(root: Path, data: list[Any], fmt: int = tarfile.PAX_FORMAT) -> list[Path]:
    paths = []
    for s, samples in enumerate(data):
        path = root / f"shard-{s:03d}.tar"
        path.write_bytes(tar_bytes(members_of(samples), fmt))
        paths.append(path)
    return paths


@pytest.mark.anyio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_local_shards_give_the_original_samples(tmp_path: Path, fmt: int) -> None:
    data = dataset(3, 7, top=f"{LONG_DIR}/ü-")
    source = TarShards(write_shards(tmp_path, data, fmt))
    assert isinstance(source, BatchedDataset)
    want = expected(data)
    assert len(source) == 21
    assert await source.get_samples(list(range(21))) == want
    assert await source.get_samples([20, 0, 7, 7]) == [want[20], want[0], want[7], want[7]]
    assert source.statistics() is None


@pytest.mark.anyio
async def test_shards_in_s3_give_the_original_samples(s3_server: S3Info, s3_prefix: str) -> None:
    data = dataset(2, 9)
    store = s3_server.store()
    keys = []
    for s, samples in enumerate(data):
        keys.append(f"{s3_prefix}train-{s}.tar")
        obstore.put(store, keys[-1], tar_bytes(members_of(samples)))
    source = TarShards(keys, store)
    want = expected(data)
    before = source.statistics()
    assert before is not None
    assert await source.get_samples(list(range(18))) == want
    after = source.statistics()
    assert after is not None
    assert after.requests - before.requests == 2  # one coalesced ranged GET per shard
    assert await source.get_sample(10) == want[10]
    single = TarShards(keys, store, coalesce_gap=0)  # tar headers lie between samples
    before = single.statistics()
    assert before is not None
    assert await single.get_samples([0, 2, 4, 9, 3]) == [want[i] for i in (0, 2, 4, 9, 3)]
    after = single.statistics()
    assert after is not None
    assert after.requests - before.requests == 5  # one ranged GET per sample
    capped = TarShards(keys, store, max_request_bytes=20_000)
    before = capped.statistics()
    assert before is not None
    assert await capped.get_samples(list(range(18))) == want
    after = capped.statistics()
    assert after is not None
    assert after.requests - before.requests == 5  # ranges of at most 20,000 bytes
    assert after.bytes_read - before.bytes_read == 80300  # the headers between them skipped


def test_index_is_saved_reused_and_rebuilt_when_the_shard_changes(tmp_path: Path) -> None:
    data = dataset(1, 4)
    (shard,) = write_shards(tmp_path, data)
    first = TarShards([shard], index_dir=tmp_path)  # beside the shard
    (saved,) = tmp_path.glob("shard-000.tar.*.index.json")
    payload = json.loads(saved.read_text())
    assert payload["samples"][0][0] == "s0/sample000"
    assert [f[0] for f in payload["samples"][0][1]] == ["jpg", "cls", "seg.png"]
    payload["samples"][0][0] = "renamed"  # proves the next open reads the file
    saved.write_text(json.dumps(payload))
    second = TarShards([shard], index_dir=tmp_path)
    assert second.indices[0].samples[0].key == "renamed"
    assert second.indices[0].samples[1:] == first.indices[0].samples[1:]
    shard.write_bytes(tar_bytes(members_of(dataset(1, 5)[0])))  # new size: index is stale
    third = TarShards([shard], index_dir=tmp_path)
    assert [s.key for s in third.indices[0].samples] == [f"s0/sample{i:03d}" for i in range(5)]


def test_saved_indices_over_s3_are_checked_by_one_listing_not_a_head_each(
    tmp_path: Path, s3_server: S3Info, s3_prefix: str, fault_proxy: LoopbackProxy
) -> None:
    store = s3_server.store(endpoint=fault_proxy.endpoint)
    keys = []
    for s, samples in enumerate(dataset(5, 3)):
        keys.append(f"{s3_prefix}listed/shard-{s}.tar")
        obstore.put(store, keys[-1], tar_bytes(members_of(samples)))
    first = TarShards(keys, store, index_dir=tmp_path)  # indices built and saved
    fault_proxy.clear()
    again = TarShards(keys, store, index_dir=tmp_path)
    assert again.indices == first.indices
    requests = fault_proxy.records()
    assert [record.method for record in requests] == ["GET"]  # no HEAD, no shard read
    assert "list-type=2" in requests[0].path  # one listing of the folder
    obstore.put(store, keys[2], tar_bytes(members_of(dataset(1, 4)[0])))  # shard 2 changes
    fault_proxy.clear()
    changed = TarShards(keys, store, index_dir=tmp_path)
    assert [len(index.samples) for index in changed.indices] == [3, 3, 4, 3, 3]
    reads = fault_proxy.records("shard-2.tar")
    assert reads  # only the changed shard is read again, to rebuild its index
    assert all(record.method == "GET" for record in reads)
    assert fault_proxy.records("shard-0.tar") == []


@pytest.mark.anyio
async def test_layout_rules(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        directory = tarfile.TarInfo("./a")
        directory.type = tarfile.DIRTYPE
        archive.addfile(directory)  # a directory: skipped
        for name, payload in [
            ("./a/x.seg.png", b"SEG"),
            ("./a/x.txt", b""),
            ("a/README", b"no field: skipped"),
            ("a/.hidden", b"no key: skipped"),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
        link = tarfile.TarInfo("a/y.lnk")
        link.type = tarfile.SYMTYPE
        link.linkname = "x.txt"
        archive.addfile(link)
    path = tmp_path / "rules.tar"
    path.write_bytes(buffer.getvalue())
    source = TarShards([path])
    assert await source.get_samples(list(range(len(source)))) == [
        {"__key__": "a/x", "seg.png": b"SEG", "txt": b""}
    ]


@pytest.mark.anyio
async def test_global_pax_headers_and_missing_end_blocks(tmp_path: Path) -> None:
    raw = tar_bytes([("k.a", b"1" * 600), ("k.b", b"2")], pax_headers={"comment": "global"})
    whole = tmp_path / "whole.tar"
    whole.write_bytes(raw)
    source = TarShards([whole])
    assert await source.get_sample(0) == {"__key__": "k", "a": b"1" * 600, "b": b"2"}
    end = raw.rindex(b"2" + bytes(511)) + 512  # cut the two zero end blocks
    cut = tmp_path / "noend.tar"
    cut.write_bytes(raw[:end])
    with pytest.raises(MalformedShardError, match=r"noend\.tar.*without the zero block"):
        TarShards([cut])
    one_block = tmp_path / "oneblock.tar"  # one zero block is enough to mark the end
    one_block.write_bytes(raw[: end + 512])
    assert await TarShards([one_block]).get_sample(0) == await source.get_sample(0)


@pytest.mark.parametrize(
    ("name", "rule"),
    [("../evil.txt", "'..' component"), ("/etc/passwd.txt", "absolute"), ("a/../b.txt", "'..'")],
)
def test_unsafe_names_are_rejected(tmp_path: Path, name: str, rule: str) -> None:
    path = tmp_path / "unsafe.tar"
    path.write_bytes(tar_bytes([("ok.txt", b"x"), (name, b"y")], tarfile.GNU_FORMAT))
    pattern = rf"unsafe\.tar.*{re.escape(repr(name))}.*{re.escape(rule)}"
    with pytest.raises(MalformedShardError, match=pattern):
        TarShards([path])


def test_duplicate_field_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "dup.tar"
    path.write_bytes(tar_bytes([("k.txt", b"1"), ("k.cls", b"2"), ("k.txt", b"3")]))
    with pytest.raises(MalformedShardError, match=r"dup\.tar.*key 'k' already has field 'txt'"):
        TarShards([path])


def test_split_key_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "split.tar"
    path.write_bytes(tar_bytes([("k.txt", b"1"), ("j.txt", b"2"), ("k.cls", b"3")]))
    with pytest.raises(MalformedShardError, match="key 'k' appears again"):
        TarShards([path])


@pytest.mark.parametrize(("cut", "what"), [(700, "member at byte 0 needs 1000"), (300, "header")])
def test_truncated_shards_are_malformed(tmp_path: Path, cut: int, what: str) -> None:
    raw = tar_bytes([("k.bin", b"x" * 1000)], tarfile.USTAR_FORMAT)
    path = tmp_path / "cut.tar"
    path.write_bytes(raw[:cut])
    with pytest.raises(MalformedShardError, match=rf"'.*cut\.tar' is truncated: a? ?{what}"):
        TarShards([path])


def test_garbage_fails_the_checksum(tmp_path: Path) -> None:
    path = tmp_path / "junk.tar"
    path.write_bytes(b"not a tar archive " * 100)
    with pytest.raises(MalformedShardError, match=r"junk\.tar.*fails its checksum"):
        TarShards([path])


@pytest.mark.anyio
async def test_shard_cut_after_indexing_is_malformed_at_read(tmp_path: Path) -> None:
    path = tmp_path / "shrunk.tar"
    raw = tar_bytes([("a.bin", b"a" * 2000), ("b.bin", b"b" * 2000)])
    path.write_bytes(raw)
    source = TarShards([path])
    path.write_bytes(raw[:1500])
    with pytest.raises(MalformedShardError, match=r"shrunk\.tar' is shorter than its index"):
        await source.get_sample(1)


@pytest.mark.anyio
async def test_decode_hook_and_its_errors(tmp_path: Path) -> None:
    (shard,) = write_shards(tmp_path, dataset(1, 3))

    def decode(sample: dict[str, Any], index: int) -> tuple[int, str, int]:
        if index == 2:
            raise ValueError("bad label")
        return index, sample["__key__"], int(sample["cls"])

    source = TarShards([shard], decode=decode)
    assert await source.get_samples([1, 0]) == [(1, "s0/sample001", 1), (0, "s0/sample000", 0)]
    with pytest.raises(ValueError, match=r"sample 's0/sample002' of shard .*shard-000\.tar.*bad"):
        await source.get_sample(2)


def test_missing_shards_and_argument_errors(tmp_path: Path, s3_server: S3Info) -> None:
    with pytest.raises(ObjectNotFoundError, match=r"nothere\.tar"):
        TarShards([tmp_path / "nothere.tar"])
    with pytest.raises(ObjectNotFoundError, match=r"'no/such\.tar'"):
        TarShards(["no/such.tar"], s3_server.store())
    with pytest.raises(TypeError, match="a single one"):
        TarShards(str(tmp_path / "x.tar"))
    with pytest.raises(ValueError, match="at least one shard"):
        TarShards([])


def test_split_name_and_numbers() -> None:
    assert split_name("a/b.seg.png", "s") == ("a/b", "seg.png")
    assert split_name("./x.jpg", "s") == ("x", "jpg")
    assert split_name("dir.v2/x.jpg", "s") == ("dir.v2/x", "jpg")
    assert split_name("a/noext", "s") is None
    assert split_name("a/.hidden", "s") is None
    assert split_name("a/trailing.", "s") is None
    assert _number(b"0000644\x00", "s", 0, "mode") == 0o644
    assert _number(b"\x80" + (8 * 2**30).to_bytes(11, "big"), "s", 0, "size") == 8 * 2**30
    assert _number(b"\xff" * 12, "s", 0, "size") == -1


_field = st.sampled_from(["jpg", "cls", "seg.png", "json", "txt"])
_samples = st.lists(
    st.tuples(
        st.text("abcxyzü_-", min_size=1, max_size=150),  # long keys exercise L, x and prefix
        st.dictionaries(_field, st.binary(max_size=1500), min_size=1, max_size=3),
    ),
    min_size=1,
    max_size=6,
    unique_by=lambda sample: sample[0],
)


def _format_ok(fmt: int, samples: list[tuple[str, dict[str, bytes]]]) -> bool:
    try:
        tar_bytes(members_of([(f"k/{key}", fields) for key, fields in samples]), fmt)
    except ValueError:  # ustar cannot store some long names
        return False
    return True


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    samples=_samples,
    fmt=st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
)
def test_any_written_shard_reads_back(tmp_path: Path, samples: Any, fmt: int) -> None:
    data = [[(f"k/{key}", fields) for key, fields in samples]]
    assume(_format_ok(fmt, samples))
    path = tmp_path / "prop.tar"
    path.write_bytes(tar_bytes(members_of(data[0]), fmt))
    source = TarShards([path])
    assert anyio.run(source.get_samples, list(range(len(source)))) == expected(data)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cut=st.integers(0, 8000), flip=st.integers(0, 8000), value=st.integers(0, 255))
def test_cut_or_corrupt_shards_fail_cleanly(
    tmp_path: Path, cut: int, flip: int, value: int
) -> None:
    samples = [(f"s{i}", {"bin": bytes([i]) * (300 * i + 1), "cls": b"c"}) for i in range(5)]
    raw = bytearray(tar_bytes(members_of(samples), tarfile.GNU_FORMAT))
    raw = raw[: min(cut, len(raw))]
    if flip < len(raw):
        raw[flip] = value
    path = tmp_path / "bad.tar"
    path.write_bytes(bytes(raw))
    error: MalformedShardError | None = None
    try:
        source = TarShards([path])
    except MalformedShardError as exc:
        error = exc
    if error is not None:
        assert "bad.tar" in str(error)
        return
    keys = [entry.key for entry in source.indices[0].samples]
    if flip >= len(raw):  # only cut: whatever was indexed is a prefix of the samples
        assert keys == [key for key, _ in samples][: len(keys)]
        got = anyio.run(source.get_samples, list(range(len(source))))
        assert got == expected([samples[: len(keys)]])


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=8),
    chunk=st.sampled_from([512, 700, 4096, 1 << 20]),
    ahead=st.integers(1, 3),
)
def test_read_ahead_indexing_equals_the_window_scan(
    sizes: list[int], chunk: int, ahead: int
) -> None:
    raw = tar_bytes([(f"s{i}.bin", bytes([i % 256]) * n) for i, n in enumerate(sizes)])
    fetched: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        fetched.append((start, end))
        return raw[start:end]

    with ThreadPoolExecutor(4) as pool:
        ahead_index = build_index(fetch, len(raw), "t", "x.tar", chunk, pool=pool, ahead=ahead)
    window_index = build_index(lambda a, b: raw[a:b], len(raw), "t", "x.tar", 64 * 1024)
    assert ahead_index == window_index
    assert all(end - start <= chunk for start, end in fetched)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=8),
    cuts=st.lists(st.integers(1, 9000), min_size=0, max_size=6),
    fail_after=st.one_of(st.none(), st.integers(0, 6)),
    keep=st.booleans(),
)
def test_a_streamed_shard_indexes_as_the_window_scan_even_if_the_stream_drops(
    sizes: list[int], cuts: list[int], fail_after: int | None, keep: bool
) -> None:
    raw = tar_bytes([(f"s{i}.bin", bytes([i % 256]) * n) for i, n in enumerate(sizes)])
    bounds = sorted({min(c, len(raw)) for c in cuts} | {0, len(raw)})
    pieces = [raw[a:b] for a, b in itertools.pairwise(bounds)]
    fetched: list[tuple[int, int]] = []

    def chunks() -> Any:
        for number, piece in enumerate(pieces):
            if number == fail_after:
                raise ConnectionResetError("the stream dropped")
            yield piece

    def fetch(start: int, end: int) -> bytes:
        fetched.append((start, end))
        return raw[start:end]

    stream = StreamReader(chunks(), len(raw), fetch, 1000, keep=keep)
    index = index_with(stream, len(raw), "t", "x.tar")
    assert index == build_index(lambda a, b: raw[a:b], len(raw), "t", "x.tar", 64 * 1024)
    if fail_after is None or fail_after >= len(pieces):
        assert fetched == []  # one request: the stream alone
    assert all(end - start <= 1000 for start, end in fetched)
    kept = stream.kept()
    if keep:  # every byte read, once, in order, through the last sample's data
        read = b"".join(kept[start] for start in sorted(kept))
        assert read == raw[: len(read)]
        assert all(entry.span[1] <= len(read) for entry in index.samples)
    else:
        assert kept == {}


@pytest.mark.anyio
async def test_indexing_over_s3_with_a_cache_is_one_get_per_shard_and_fills_it(
    s3_server: S3Info, s3_prefix: str
) -> None:
    data = dataset(3, 7)
    store = s3_server.store()
    keys = []
    for s, samples in enumerate(data):
        keys.append(f"{s3_prefix}stream-{s}.tar")
        obstore.put(store, keys[-1], tar_bytes(members_of(samples)))
    cache = KnownFutureCache(1 << 20)
    source = TarShards(keys, store, cache=cache)  # no saved index: built as each shard streams
    indexing = source.statistics()
    assert indexing is not None
    assert indexing.requests == 3  # one GET per shard: no HEAD, no chunked ranges
    assert cache.statistics().entries == 21  # every sample offered while indexing
    assert await source.get_samples(list(range(21))) == expected(data)
    after = source.statistics()
    assert after is not None
    assert after.requests == 3  # the epoch is served from what indexing read


def test_read_ahead_skips_the_chunks_inside_large_members() -> None:
    raw = tar_bytes([("a.bin", b"x" * 100_000), ("b.bin", b"y" * 100_000)], tarfile.USTAR_FORMAT)
    fetched: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        fetched.append((start, end))
        return raw[start:end]

    with ThreadPoolExecutor(2) as pool:
        index = build_index(fetch, len(raw), "t", "x.tar", 4096, pool=pool, ahead=1)
    assert [s.key for s in index.samples] == ["a", "b"]
    # header chunk, its read-ahead neighbour, then the chunks holding the next headers only
    assert sum(end - start for start, end in fetched) <= 8 * 4096
    assert len(raw) > 200_000


@pytest.mark.anyio
async def test_numpy_integers_are_taken_as_counts(tmp_path: Path) -> None:
    (shard,) = write_shards(tmp_path, dataset(1, 2))
    source = TarShards([shard], max_concurrency=np.int64(2), index_threads=np.int64(1))
    samples = await source.read_samples([1, 0])
    assert [sample["__key__"] for sample in samples] == ["s0/sample001", "s0/sample000"]


def test_max_concurrency_and_index_dir_are_checked_up_front(tmp_path: Path) -> None:
    (shard,) = write_shards(tmp_path, dataset(1, 2))
    for bound in (0, -3):
        with pytest.raises(
            ValueError, match=rf"^max_concurrency must be an integer >= 1 but got {bound}$"
        ):
            TarShards([shard], max_concurrency=bound)
    with pytest.raises(
        TypeError, match=r"^max_concurrency must be an integer >= 1 but got float \(2\.0\)$"
    ):
        TarShards([shard], max_concurrency=2.0)  # type: ignore[call-overload]
    with pytest.raises(
        TypeError, match=r"^max_concurrency must be an integer >= 1 but got a bool \(True\)$"
    ):
        TarShards([shard], max_concurrency=True)
    with pytest.raises(ValueError, match=r"^index_threads must be an integer >= 1 but got 0$"):
        TarShards([shard], index_threads=0)
    with pytest.raises(
        TypeError, match=r"^index_threads must be an integer >= 1 but got a bool \(False\)$"
    ):
        TarShards([shard], index_threads=False)
    a_file = tmp_path / "indices.txt"
    a_file.write_text("not a directory")
    with pytest.raises(ValueError, match=r"index_dir must be a directory but got .*indices\.txt"):
        TarShards([shard], index_dir=a_file)
    with pytest.raises(ValueError, match=r"indices\.txt/sub'.*'.*indices\.txt' is a file"):
        TarShards([shard], index_dir=a_file / "sub")
    with pytest.raises(TypeError, match=r"index_dir must be a directory path .* but got int \(5\)"):
        TarShards([shard], index_dir=5)  # type: ignore[call-overload]
    assert list(tmp_path.glob("*.index.json")) == []  # refused before any indexing


@pytest.mark.anyio
async def test_a_bounded_source_reads_with_one_read_in_flight(tmp_path: Path) -> None:
    data = dataset(1, 3)
    (shard,) = write_shards(tmp_path, data)
    source = TarShards([shard], max_concurrency=1)
    assert await source.get_samples([2, 0, 1]) == [expected(data)[i] for i in (2, 0, 1)]


def test_concurrent_index_writers_of_one_sampleless_shard_never_collide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "empty.tar"  # no samples: only a directory and a file without a field
    path.write_bytes(tar_bytes([("README", b"no field")]))
    writers = 4
    # Every writer has written its temporary file before any renames it: with one shared
    # temporary name the second rename would find it gone (FileNotFoundError).
    renames = threading.Barrier(writers, timeout=30)
    real_replace = os.replace

    def replace_together(source: Any, target: Any) -> None:
        renames.wait()
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace_together)
    index_dir = tmp_path / "indices"
    with ThreadPoolExecutor(writers) as pool:
        opened = list(pool.map(lambda _: TarShards([path], index_dir=index_dir), range(writers)))
    monkeypatch.undo()
    assert [len(source) for source in opened] == [0] * writers
    (saved,) = index_dir.iterdir()  # one index, no temporary file left behind
    assert re.fullmatch(r"empty\.tar\.[0-9a-f]{8}\.index\.json", saved.name)
    assert json.loads(saved.read_text())["samples"] == []
    assert len(TarShards([path], index_dir=index_dir)) == 0


def test_a_volume_label_is_not_a_sample(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        label = tarfile.TarInfo("VOLUME.1")  # what `tar --label=VOLUME.1` writes first
        label.type = b"V"
        archive.addfile(label)
        for name, payload in [("k.txt", b"one"), ("k.cls", b"1")]:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
    path = tmp_path / "labelled.tar"
    path.write_bytes(buffer.getvalue())
    source = TarShards([path])
    assert len(source) == 1
    assert anyio.run(source.get_sample, 0) == {"__key__": "k", "txt": b"one", "cls": b"1"}


@pytest.mark.parametrize(
    "records",
    [
        pytest.param(  # what `tar --sparse --format=posix` writes (sparse format 1.0)
            {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "a.bin"},
            id="pax-1.0",
        ),
        pytest.param(  # --sparse-version=0.1
            {"GNU.sparse.map": "0,4,8,4", "GNU.sparse.numblocks": "2", "GNU.sparse.name": "a.bin"},
            id="pax-0.1",
        ),
    ],
)
def test_a_pax_sparse_file_is_refused_naming_shard_and_member(
    tmp_path: Path, records: dict[str, str]
) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        ok = tarfile.TarInfo("k.txt")
        ok.size = 2
        archive.addfile(ok, io.BytesIO(b"ok"))
        sparse = tarfile.TarInfo("GNUSparseFile.0/a.bin")
        sparse.pax_headers = records
        sparse.size = 8  # map and data, as GNU tar stores them: not the file
        archive.addfile(sparse, io.BytesIO(b"1\n0\n4\nAB"))
    path = tmp_path / "sparse.tar"
    path.write_bytes(buffer.getvalue())
    with pytest.raises(
        MalformedShardError,
        match=r"sparse\.tar': member 'a\.bin' at byte \d+ is a sparse file \(pax records "
        r"GNU\.sparse\..*does not read",
    ):
        TarShards([path])


@pytest.mark.parametrize(("typeflag", "what"), [(b"S", "GNU sparse"), (b"M", "multi-volume")])
def test_gnu_sparse_and_continuation_members_are_refused(
    tmp_path: Path, typeflag: bytes, what: str
) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        member = tarfile.TarInfo("k.bin")
        member.type = typeflag
        archive.addfile(member)
    path = tmp_path / "gnu.tar"
    path.write_bytes(buffer.getvalue())
    pattern = rf"gnu\.tar': member 'k\.bin' at byte 0 .*{what}"
    with pytest.raises(MalformedShardError, match=pattern):
        TarShards([path])


def test_the_typed_options_are_the_keywords_of_the_constructor() -> None:
    keywords = [
        name
        for name, parameter in inspect.signature(TarShards.__init__).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name != "decode"
    ]
    assert list(TarShardsOptions.__annotations__) == keywords
