"""Decode hooks: ``decode(data, index)``, or ``decode(data, index, key)`` with the path or key."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from obstore.store import MemoryStore

from aioloader.sources import LocalFiles, ObjectStore
from aioloader.sources._decode import decode_bytes, decode_named, takes_key

pytestmark = pytest.mark.anyio


def two(data: bytes, index: int) -> tuple[bytes, int]:
    return data, index


def three(data: bytes, index: int, key: Any) -> tuple[bytes, int, Any]:
    return data, index, key


def loose(*args: Any) -> int:
    return len(args)


def test_takes_key_counts_positional_parameters_only() -> None:
    assert [takes_key(f) for f in (decode_bytes, two, three, loose)] == [False, False, True, False]
    assert takes_key(functools.partial(three, b"x")) is False
    assert takes_key(lambda data, index, key=None: data) is True
    assert takes_key(print) is False  # *args only


def test_decode_named_names_the_sample() -> None:
    assert decode_named(three, b"d", 1, "file 'x'", "x") == (b"d", 1, "x")

    def bad(data: bytes, index: int) -> None:
        raise ValueError("bad magic")

    with pytest.raises(ValueError, match=r"^decoding file 'x' \(sample 4\) failed: bad magic") as e:
        decode_named(bad, b"d", 4, "file 'x'")
    assert getattr(e.value, "__notes__", None) == ["aioloader: reading dataset index 4: file 'x'"]


async def test_local_files_pass_the_path_to_decoders_that_take_it(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"A")
    assert await LocalFiles(tmp_path, two).get_sample(0) == (b"A", 0)
    assert await LocalFiles(tmp_path, three).get_sample(0) == (b"A", 0, tmp_path / "a.bin")
    assert await LocalFiles(tmp_path, loose).get_sample(0) == 2


async def test_object_store_passes_the_key_to_decoders_that_take_it() -> None:
    store = MemoryStore()
    store.put("k/0", b"zero")
    assert await ObjectStore(store, ["k/0"], decode=two).get_sample(0) == (b"zero", 0)
    assert await ObjectStore(store, ["k/0"], decode=three).get_sample(0) == (b"zero", 0, "k/0")
