"""Samples stored one per file on a local disk.

Files are read in pieces of 1 MiB, each in a worker thread (``aioloader._files``: aiofiles
on asyncio and uvloop, anyio's threads on trio, where aiofiles cannot run). A file no
larger than one piece, the common case, is opened, read and closed by one call: one
thread hop per file. A cancelled read never leaves a file open.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from .._errors import ObjectNotFoundError, SourceError
from .._files import read_file as read_pieces
from ._concurrency import gather_ordered
from ._decode import decode_bytes, decode_named, decode_npy, decoder_takes_key, naming_sample

__all__ = ("LocalFiles", "decode_bytes", "decode_npy")

SampleT = TypeVar("SampleT")

PathLike = str | os.PathLike[str]


def check_index(index: Any, length: int) -> int:
    """``index`` as an int in ``[0, length)``, or a clear ``TypeError``/``IndexError``."""
    if isinstance(index, bool) or not hasattr(index, "__index__"):
        raise TypeError(f"index must be an integer but got {type(index).__name__} ({index!r})")
    position = int(index)
    if not 0 <= position < length:
        raise IndexError(f"index must be in [0, {length}) but got {position}")
    return position


def _list_directory(root: Path, pattern: str) -> list[Path]:
    paths = [p for p in root.glob(pattern) if p.is_file()]
    paths.sort(key=lambda p: p.relative_to(root).as_posix())
    if not paths:
        raise ValueError(
            f"paths_or_directory {str(root)!r} holds no file matching pattern {pattern!r}"
        )
    return paths


def _check_pattern(pattern: Any) -> None:
    """Refuse a ``pattern`` that is not a non-empty relative glob, naming what was seen."""
    if pattern is None:
        return
    if not isinstance(pattern, str):
        raise TypeError(
            f"pattern must be a str (a glob such as '*.jpg') but got "
            f"{type(pattern).__name__} ({pattern!r})"
        )
    if not pattern:
        raise ValueError("pattern must be a non-empty glob but got ''")
    if pattern.startswith("/"):
        raise ValueError(
            f"pattern must be relative to the directory but got {pattern!r}, which is absolute"
        )


async def read_file(path: Path) -> bytes:
    """All bytes of a file, read in worker threads (one call when it is small).

    Raises:
        ObjectNotFoundError: The file does not exist.
        SourceError: Any other OS error (permission, a directory...).
    """
    try:
        return await read_pieces(path)
    except FileNotFoundError:
        raise ObjectNotFoundError(f"file not found: {str(path)!r}") from None
    except OSError as exc:
        raise SourceError(f"cannot read file {str(path)!r}: {exc.strerror or exc}") from exc


class LocalFiles(Generic[SampleT]):
    """One sample per local file, read asynchronously and passed through ``decode``.

    Args:
        paths_or_directory: A sequence of paths (kept in the given order) or a directory,
            whose files matching ``pattern`` are sorted by relative path so that indices
            are stable from run to run.
        decode: ``decode(data, index) -> sample``, or one marked ``@takes_key`` called as
            ``decode(data, index, path)`` to also get the file's ``Path``; ``decode_bytes``
            (the default) returns the bytes, ``decode_npy`` loads a ``.npy`` array without
            pickle. A ``ValueError`` it raises is raised again naming the file.
        pattern: Glob for a directory (``"*"`` by default, ``"**/*.npy"`` recurses).

    >>> import tempfile, pathlib, anyio
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (root / "b.txt").write_bytes(b"B"); _ = (root / "a.txt").write_bytes(b"A")
    >>> files = LocalFiles(root)
    >>> [p.name for p in files.paths], anyio.run(files.get_sample, 1)
    (['a.txt', 'b.txt'], b'B')
    """

    @overload
    def __init__(
        self: LocalFiles[bytes],
        paths_or_directory: PathLike | Sequence[PathLike],
        *,
        pattern: str | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        paths_or_directory: PathLike | Sequence[PathLike],
        decode: Callable[[bytes, int], SampleT] | Callable[[bytes, int, Path], SampleT],
        *,
        pattern: str | None = None,
    ) -> None: ...

    def __init__(
        self,
        paths_or_directory: PathLike | Sequence[PathLike],
        decode: Callable[..., Any] = decode_bytes,
        *,
        pattern: str | None = None,
    ) -> None:
        if not callable(decode):
            raise TypeError(f"decode must be callable but got {type(decode).__name__}")
        _check_pattern(pattern)
        if isinstance(paths_or_directory, (str, os.PathLike)):
            root = Path(paths_or_directory)
            if not root.is_dir():
                raise ValueError(
                    "paths_or_directory must be a directory or a sequence of paths but got "
                    f"{str(root)!r}, which is not a directory"
                )
            paths = _list_directory(root, "*" if pattern is None else pattern)
        else:
            if pattern is not None:
                raise ValueError("pattern applies to a directory, not to a sequence of paths")
            paths = []
            for position, item in enumerate(paths_or_directory):
                if not isinstance(item, (str, os.PathLike)):
                    raise TypeError(
                        f"paths_or_directory[{position}] must be a str or path but got "
                        f"{type(item).__name__} ({item!r})"
                    )
                paths.append(Path(item))
        self.paths: tuple[Path, ...] = tuple(paths)
        self.decode = decode
        self._decode_takes_path = decoder_takes_key(decode)

    def __len__(self) -> int:
        return len(self.paths)

    def __repr__(self) -> str:
        return f"LocalFiles({len(self.paths)} files)"

    async def read_bytes(self, index: int) -> bytes:
        """The raw bytes of sample ``index``."""
        return await read_file(self.paths[check_index(index, len(self.paths))])

    async def get_sample(self, index: int) -> SampleT:
        """Read and decode the file at ``index``."""
        position = check_index(index, len(self.paths))
        path = self.paths[position]
        with naming_sample(position, lambda: f"file {str(path)!r}"):
            data = await read_file(path)
        key = (path,) if self._decode_takes_path else ()
        result: SampleT = decode_named(self.decode, data, position, str(path), *key)
        return result

    async def get_samples(self, indices: Sequence[int]) -> list[SampleT]:
        """Read one batch's files concurrently; results in the order of ``indices``."""
        return await gather_ordered(self.get_sample, indices)
