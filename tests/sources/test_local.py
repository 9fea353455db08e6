"""LocalFiles: stable indices, exact bytes on every backend, decoders, clear errors."""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from aioloader import ObjectNotFoundError, SourceError
from aioloader._files import PIECE
from aioloader._protocols import BatchedDataset
from aioloader.sources._concurrency import gather_ordered
from aioloader.sources._decode import decode_bytes, decode_npy
from aioloader.sources._local import LocalFiles
from tests._support.storm import cancel_points, cancellers, no_file_left_open

pytestmark = pytest.mark.anyio


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name, data in [("b.bin", b"BB"), ("a.bin", b"A"), ("c.txt", b"CCC")]:
        (tmp_path / name).write_bytes(data)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.bin").write_bytes(b"DDDD")
    return tmp_path


async def test_directory_is_sorted_and_read_exactly(tree: Path) -> None:
    files = LocalFiles(tree)
    assert [p.name for p in files.paths] == ["a.bin", "b.bin", "c.txt"]
    assert len(files) == 3
    assert await files.get_sample(0) == b"A"
    assert await files.get_samples([2, 0, 1, 0]) == [b"CCC", b"A", b"BB", b"A"]
    assert await files.get_samples([]) == []


async def test_recursive_pattern_sorts_by_relative_path(tree: Path) -> None:
    files = LocalFiles(tree, pattern="**/*.bin")
    assert [p.relative_to(tree).as_posix() for p in files.paths] == [
        "a.bin",
        "b.bin",
        "sub/d.bin",
    ]
    assert await files.get_samples([2, 1]) == [b"DDDD", b"BB"]


async def test_path_list_keeps_its_order(tree: Path) -> None:
    files = LocalFiles([tree / "c.txt", str(tree / "a.bin")], decode_bytes)
    assert await files.get_samples([0, 1]) == [b"CCC", b"A"]
    assert isinstance(files, BatchedDataset)


async def test_decode_hook_gets_bytes_and_index(tree: Path) -> None:
    files = LocalFiles(tree, lambda data, index: (index, len(data)))
    assert await files.get_samples([0, 1, 2]) == [(0, 1), (1, 2), (2, 3)]


async def test_decode_npy_round_trip(tmp_path: Path) -> None:
    arrays: list[np.ndarray] = [np.arange(6, dtype=np.int32).reshape(2, 3), np.linspace(0, 1, 5)]
    for i, array in enumerate(arrays):
        (tmp_path / f"{i}.npy").write_bytes(_npy(array))
    files = LocalFiles(tmp_path, decode_npy, pattern="*.npy")
    loaded = await files.get_samples([0, 1])
    for got, expected in zip(loaded, arrays, strict=True):
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


async def test_pickled_npy_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "evil.npy"
    path.write_bytes(_npy(np.array([{"a": 1}], dtype=object)))
    files = LocalFiles([path], decode_npy)
    with pytest.raises(ValueError, match=r"evil\.npy.*refuses pickled data"):
        await files.get_sample(0)


def test_decode_npy_refuses_other_bytes() -> None:
    with pytest.raises(ValueError, match=r"needs \.npy data.*b'PK\\x03\\x04"):
        decode_npy(b"PK\x03\x04zipzip", 0)


async def test_missing_file_names_its_path(tmp_path: Path) -> None:
    missing = tmp_path / "gone.bin"
    files = LocalFiles([missing])
    with pytest.raises(ObjectNotFoundError, match=r"gone\.bin"):
        await files.get_sample(0)


async def test_a_directory_in_the_list_is_a_source_error(tmp_path: Path) -> None:
    files = LocalFiles([tmp_path])
    with pytest.raises(SourceError, match="cannot read file"):
        await files.get_sample(0)


async def test_batch_error_is_the_first_failing_position_unwrapped(tree: Path) -> None:
    files = LocalFiles([tree / "a.bin", tree / "nope1", tree / "nope2"])
    with pytest.raises(ObjectNotFoundError, match="nope1"):
        await files.get_samples([0, 1, 2])


async def test_index_checks(tree: Path) -> None:
    files = LocalFiles(tree)
    with pytest.raises(IndexError, match=r"index must be in \[0, 3\) but got 3"):
        await files.get_sample(3)
    with pytest.raises(IndexError, match="but got -1"):
        await files.get_sample(-1)
    with pytest.raises(TypeError, match="index must be an integer but got bool"):
        await files.get_sample(True)


def test_argument_errors(tree: Path) -> None:
    with pytest.raises(ValueError, match=r"holds no file matching pattern '\*\.xyz'"):
        LocalFiles(tree, pattern="*.xyz")
    with pytest.raises(ValueError, match="not a directory"):
        LocalFiles(tree / "a.bin")
    with pytest.raises(ValueError, match="pattern applies to a directory"):
        LocalFiles([tree / "a.bin"], pattern="*")
    with pytest.raises(TypeError, match=r"paths_or_directory\[1\] must be a str or path"):
        LocalFiles([tree / "a.bin", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="decode must be callable"):
        LocalFiles(tree, "raw")  # type: ignore[call-overload]


async def test_gather_reports_the_lowest_failing_position_whatever_the_timing() -> None:
    later_failed = anyio.Event()
    finished: list[int] = []

    async def read(position: int) -> int:
        if position == 1:
            await later_failed.wait()  # fails only after position 2 has failed
            finished.append(position)
            raise KeyError("position 1")
        if position == 2:
            later_failed.set()
            raise KeyError("position 2")
        if position == 3:
            await anyio.sleep_forever()  # cancelled: it comes after the failure at 2
        finished.append(position)
        return position

    with pytest.raises(KeyError, match="position 1"):
        await gather_ordered(read, [0, 1, 2, 3])
    assert finished == [0, 1]  # position 1 was left to finish, so its error wins
    assert await gather_ordered(read, [0, 4]) == [0, 4]


async def test_a_corrupt_file_in_a_batch_names_its_step_slot_index_and_path(
    tmp_path: Path,
) -> None:
    import io

    import numpy as np

    from aioloader import DataLoader, SequentialSampler
    from aioloader.testing import StackCollator

    for i in range(6):
        buffer = io.BytesIO()
        np.save(buffer, np.full(3, i, dtype=np.int64))
        (tmp_path / f"{i}.npy").write_bytes(buffer.getvalue())
    (tmp_path / "4.npy").write_bytes(b"not an array")
    files = LocalFiles(tmp_path, decode_npy, pattern="*.npy")
    loader = DataLoader(files, SequentialSampler(6, 3), StackCollator(), seed=0)

    async def second_batch() -> None:
        async with loader.stream(1, 2) as batches:
            await batches.__anext__()

    with pytest.raises(ValueError, match=r"decode_npy needs \.npy data") as caught:
        await second_batch()
    notes = getattr(caught.value, "__notes__", [])
    assert notes[0] == f"aioloader: reading dataset index 4: {tmp_path / '4.npy'}"
    assert notes[-1] == (
        "aioloader: while building global step 1 (epoch 0, step 1), slot 1, dataset index 4"
    )


@pytest.mark.parametrize(
    ("pattern", "error", "message"),
    [
        (5, TypeError, r"pattern must be a str \(a glob such as '\*\.jpg'\) but got int \(5\)"),
        (b"*", TypeError, r"pattern must be a str .* but got bytes \(b'\*'\)"),
        ("", ValueError, r"pattern must be a non-empty glob but got ''"),
        ("/etc/*", ValueError, r"pattern must be relative to the directory but got '/etc/\*'"),
    ],
)
def test_pattern_is_checked_up_front(
    tree: Path, pattern: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        LocalFiles(tree, pattern=pattern)


async def test_a_file_larger_than_a_piece_is_read_exactly(tmp_path: Path) -> None:
    data = random.Random(3).randbytes(2 * PIECE + 5)  # three pieces through AsyncFile
    (tmp_path / "big.bin").write_bytes(data)
    (tmp_path / "small.bin").write_bytes(data[:PIECE])  # one piece: one worker-thread call
    files = LocalFiles(tmp_path)
    assert await files.get_samples([0, 1, 0]) == [data, data[:PIECE], data]


async def test_a_cancellation_storm_leaves_no_file_open(tmp_path: Path) -> None:
    data = random.Random(5).randbytes(PIECE + 4096)
    sizes = [0, 2048, 65536, PIECE, PIECE + 1, PIECE + 4096]  # up to two pieces
    for number, size in enumerate(sizes):
        (tmp_path / f"{number}.bin").write_bytes(data[:size])
    files = LocalFiles(tmp_path)
    chooser = random.Random(20260520)
    finished = 0
    ways = cancellers()  # a cancel scope; on asyncio also a plain task.cancel()
    with no_file_left_open(tmp_path):
        for round_, checkpoints in enumerate(cancel_points(20260520, 100)):
            batch = [chooser.randrange(len(sizes)) for _ in range(4)]

            async def read(batch: list[int] = batch) -> None:
                assert await files.get_samples(batch) == [data[: sizes[i]] for i in batch]

            cancel = ways[round_ // 2 % len(ways)]
            finished += await cancel(checkpoints, read)
    assert 0 < finished < 100  # the storm's first round was cut short, its second was not
