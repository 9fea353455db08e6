"""The disk tier: one file per entry, written atomically and checked when read.

An entry of sample bytes ``[start, end)`` of shard ``key`` at version ``tag`` (its ETag, or
a local file's mtime) is the file ``<dir>/<digest of key and tag>/<start>-<end>-<crc32>``.
It is written as a temporary file, flushed with ``fsync`` and renamed into place, so a
crash (even SIGKILL) leaves either no file or a whole one; temporary files are deleted when
the tier opens. A file is used only when its size and CRC-32 match its name, so a damaged
or truncated file is a miss (and is deleted), never data. A changed shard has a new tag,
hence a new folder: its old entries are never read, and are deleted when the tier opens.

The folder survives restarts: ``open`` finds the entries of the current shards again, up
to the bound (files beyond it are deleted). Methods that touch files block: the cache calls
them in worker threads.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import zlib
from collections.abc import Callable
from pathlib import Path

from ._policy import Policy
from ._tiers import TierBook

__all__ = ("DiskTier", "entry_name")

_TMP = ".tmp"


def shard_folder(key: str, tag: str) -> str:
    """The folder name of shard ``key`` at version ``tag``."""
    return hashlib.sha1(f"{key}\0{tag}".encode()).hexdigest()[:24]


def entry_name(start: int, end: int, data: bytes) -> str:
    """The file name of bytes ``[start, end)`` holding ``data``."""
    return f"{start}-{end}-{zlib.crc32(data):08x}"


class DiskTier(TierBook):
    """Entries held as files under ``directory``, at most ``max_bytes`` of them.

    Args:
        directory: The tier's folder (created if missing); give each dataset its own.
        max_bytes: Most bytes of entry files (temporary files included).
        policy: The eviction order.
    """

    def __init__(self, directory: Path, max_bytes: int, policy: Policy) -> None:
        super().__init__(max_bytes, policy)
        self.directory = directory
        self.paths: dict[int, Path] = {}
        self._counter = 0

    def open(
        self,
        folders: dict[str, str],
        locate: Callable[[str, int, int], int | None],
    ) -> None:
        """Find the entries left by earlier runs (blocking).

        Args:
            folders: ``{folder name: shard key}`` of the current shards.
            locate: ``locate(key, start, end)``: the sample whose span that is, or None.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        for folder in sorted(self.directory.iterdir()):
            key = folders.get(folder.name)
            if key is None or not folder.is_dir():
                _remove_tree(folder)  # an old version of a shard, or not ours
                continue
            for path in sorted(folder.iterdir()):
                unit = None if _TMP in path.name else _parse(path.name, key, locate)
                size = _size_of(path)
                if unit is None or size is None or unit in self.sizes or size != _span(path.name):
                    _unlink(path)  # a partial write, a stale or damaged entry
                    continue
                if self.bytes + size > self.max_bytes:
                    _unlink(path)  # the bound may have shrunk since the last run
                    continue
                self.add(unit, size)
                self.paths[unit] = path

    def path_for(self, unit: int, key: str, tag: str, start: int, end: int, data: bytes) -> Path:
        """Where ``unit``'s entry goes (its folder is created later, by ``write``)."""
        return self.directory / shard_folder(key, tag) / entry_name(start, end, data)

    def write(self, path: Path, data: bytes) -> None:
        """Write ``data`` to ``path`` atomically: temporary file, fsync, rename (blocking)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._counter += 1
        tmp = path.with_name(f"{path.name}{_TMP}{os.getpid()}-{self._counter}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    @staticmethod
    def read(path: Path) -> bytes | None:
        """The entry's bytes if the file is whole and matches its name, else None (blocking)."""
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            return None
        start, end, crc = path.name.split("-")
        if len(data) != int(end) - int(start) or f"{zlib.crc32(data):08x}" != crc:
            _unlink(path)
            return None
        return data

    @staticmethod
    def delete(path: Path) -> None:
        """Remove an evicted entry's file (blocking)."""
        _unlink(path)


def _parse(name: str, key: str, locate: Callable[[str, int, int], int | None]) -> int | None:
    parts = name.split("-")
    if len(parts) != 3 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return locate(key, int(parts[0]), int(parts[1]))


def _span(name: str) -> int:
    start, end, _ = name.split("-")
    return int(end) - int(start)


def _size_of(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _remove_tree(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        _unlink(path)
