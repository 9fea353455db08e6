"""Decode hooks: ``decode(data, index)``, or, marked ``@takes_key``, ``decode(data, index, key)``
with the path or key; today's three-parameter form still gets the key, with a warning."""

from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Any

import pytest
from obstore.store import MemoryStore

from aioloader import takes_key
from aioloader.core import wants_key
from aioloader.sources import LocalFiles, ObjectStore
from aioloader.sources._decode import decode_bytes, decode_named, decoder_takes_key

pytestmark = pytest.mark.anyio


def two(data: bytes, index: int) -> tuple[bytes, int]:
    return data, index


@takes_key
def three(data: bytes, index: int, key: Any) -> tuple[bytes, int, Any]:
    return data, index, key


def loose(*args: Any) -> int:
    return len(args)


def test_a_marked_decoder_gets_the_key_and_an_unmarked_one_does_not() -> None:
    assert [decoder_takes_key(f) for f in (decode_bytes, two, three, loose)] == [
        False,
        False,
        True,
        False,
    ]
    assert wants_key(three) is True
    assert decoder_takes_key(functools.partial(three, b"x")) is False  # two left, unmarked
    assert decoder_takes_key(print) is False  # *args only, no signature read
    assert decoder_takes_key(takes_key(lambda *args: args)) is True  # *args takes the key
    assert decoder_takes_key(takes_key(print)) is True  # a builtin, wrapped and marked


def test_a_decoder_marked_but_taking_two_arguments_is_refused() -> None:
    with pytest.raises(
        TypeError,
        match=r"^decode is marked @takes_key so must accept decode\(data, index, key\) but "
        r"'test_a_decoder_marked_but_taking_two_arguments_is_refused.<locals>.<lambda>' has the "
        r"signature \(data, index\)$",
    ):
        decoder_takes_key(takes_key(lambda data, index: data))
    with pytest.raises(TypeError, match=r"^takes_key must mark a callable but got int$"):
        takes_key(3)  # type: ignore[type-var]


def test_the_three_parameter_form_still_gets_the_key_and_warns_once() -> None:
    def old(data: bytes, index: int, key: Any) -> Any:
        return key

    with pytest.warns(DeprecationWarning, match=r"decoder .*\.old gets the key") as caught:
        assert decoder_takes_key(old) is True
    assert [str(w.message) for w in caught] == [
        "aioloader: the decoder test_the_three_parameter_form_still_gets_the_key_and_warns_once"
        ".<locals>.old gets the key because of its signature, which is deprecated (a signature "
        "will not be read): mark it @takes_key (from aioloader import takes_key) to keep "
        "getting the key, or give it two parameters"
    ]
    assert caught[0].filename == __file__  # points at the caller, not the package
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert decoder_takes_key(old) is True  # once per function


def test_a_lambda_with_a_default_key_is_the_old_form() -> None:
    with pytest.warns(DeprecationWarning, match="@takes_key"):
        assert decoder_takes_key(lambda data, index, key=None: data) is True


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
    assert await LocalFiles(tmp_path, takes_key(lambda *args: len(args))).get_sample(0) == 3


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # warned once per function: one run
async def test_local_files_warn_at_the_users_line_for_the_old_form(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"A")

    def old_form(data: bytes, index: int, path: Path) -> Path:
        return path

    with pytest.warns(DeprecationWarning, match=r"decoder .*old_form gets the key") as caught:
        source = LocalFiles(tmp_path, old_form)
    assert [w.filename for w in caught] == [__file__]
    assert await source.get_sample(0) == tmp_path / "a.bin"


async def test_object_store_passes_the_key_to_decoders_that_take_it() -> None:
    store = MemoryStore()
    store.put("k/0", b"zero")
    assert await ObjectStore(store, ["k/0"], decode=two).get_sample(0) == (b"zero", 0)
    assert await ObjectStore(store, ["k/0"], decode=three).get_sample(0) == (b"zero", 0, "k/0")
