"""aioloader._files: exact bytes at every size, aiofiles on asyncio, anyio's threads on trio,
and no file left open however a read or a write is cancelled."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import aiofiles
import aiofiles.threadpool.binary
import anyio
import pytest

from aioloader._files import PIECE, AsyncFile, _read_rest, open_file, read_file
from tests._support.storm import cancel_points, cancellers, no_file_left_open

pytestmark = pytest.mark.anyio


def _data(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


@pytest.mark.parametrize("size", [0, 1, 15, 16, 17, 48, 50])
async def test_read_file_returns_exact_bytes_at_every_size(tmp_path: Path, size: int) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(_data(size, size))
    assert await read_file(path, piece=16) == _data(size, size)


async def test_read_file_with_the_default_piece_reads_a_large_file_exactly(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(_data(2 * PIECE + 3))
    assert await read_file(path) == _data(2 * PIECE + 3)


async def test_a_file_that_changed_size_since_it_was_opened_is_read_to_its_end(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(_data(40))
    for believed in (24, 40, 64):  # grew since, same, shrank since
        async with await open_file(path) as file:
            assert await _read_rest(file, believed, 16) == _data(40)


async def test_read_file_raises_open_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        await read_file(tmp_path / "missing")
    with pytest.raises(IsADirectoryError):
        await read_file(tmp_path)


async def test_aiofiles_on_asyncio_and_anyio_on_trio(
    tmp_path: Path, anyio_backend: tuple[str, dict[str, Any]]
) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    async with await open_file(path) as file:
        calls = vars(file)["_calls"]
        if anyio_backend[0] == "trio":
            assert type(calls) is anyio.AsyncFile
            # the reason: aiofiles needs a running asyncio loop
            with pytest.raises(RuntimeError, match="no running event loop"):
                await aiofiles.open(path, "rb")
        else:
            assert type(calls) is aiofiles.threadpool.binary.AsyncBufferedReader
        assert await file.read() == b"abc"


async def test_a_file_aiofiles_cannot_wrap_goes_through_anyio(tmp_path: Path) -> None:
    import tempfile

    with tempfile.SpooledTemporaryFile(max_size=8) as spool:
        file = AsyncFile(spool)
        assert type(vars(file)["_calls"]) is anyio.AsyncFile
        await file.writelines([b"ab", b"cd"])
        assert await file.write(b"e") == 1
        spool.seek(0)
        assert await file.read() == b"abcde"
        await file.aclose()
        assert spool.closed


@pytest.mark.parametrize("kind", ["file", "spool"])
async def test_aclose_closes_in_a_cancelled_scope(tmp_path: Path, kind: str) -> None:
    import tempfile

    if kind == "file":
        (tmp_path / "f.bin").write_bytes(b"abc")
        file = await open_file(tmp_path / "f.bin")
    else:  # through anyio on every backend
        file = AsyncFile(tempfile.SpooledTemporaryFile(max_size=8))  # noqa: SIM115
    with anyio.CancelScope() as scope:
        scope.cancel()
        await file.aclose()
    assert file.wrapped.closed


async def test_writes_land_in_order(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    async with await open_file(path, "wb") as file:
        await file.writelines([b"ab", b"cd"])
        assert await file.write(b"ef") == 2
    assert path.read_bytes() == b"abcdef"


async def test_a_cancellation_storm_leaves_no_file_open(tmp_path: Path) -> None:
    sizes = [0, 5, 16, 100, 3000]  # with 16-byte pieces: one call, or up to 188 pieces
    paths = []
    for number, size in enumerate(sizes):
        paths.append(tmp_path / f"{number}.bin")
        paths[-1].write_bytes(_data(size, number))
    finished = 0

    async def read_all() -> None:
        async with anyio.create_task_group() as group:
            for path in paths:
                group.start_soon(read_file, path, 16)

    async def write_some() -> None:
        async with await open_file(tmp_path / "out.bin", "wb") as file:
            for piece in range(20):
                await file.write(bytes([piece]) * 16)

    ways = cancellers()  # a cancel scope; on asyncio also a plain task.cancel()
    with no_file_left_open(tmp_path):
        for round_, checkpoints in enumerate(cancel_points(20260519, 150)):
            operation = (read_all, write_some)[round_ % 2]
            cancel = ways[round_ // 2 % len(ways)]
            finished += await cancel(checkpoints, operation)
    assert 0 < finished < 150  # the storm's first round was cut short, its second was not
