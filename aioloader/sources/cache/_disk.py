"""The disk tier: one file per entry, written atomically and checked when read.

An entry of sample bytes ``[start, end)`` of shard ``key`` at version ``tag`` (its ETag, or
a local file's mtime) is the file ``<dir>/<digest of key and tag>/<start>-<end>-<crc32>``.
It is written under a temporary name, flushed with ``fsync`` and renamed into place, so a
crash (even SIGKILL) leaves either no file or a whole one. A file is used only when its
size and CRC-32 match its name, so a damaged or truncated file is a miss (and is deleted),
never data. A changed shard has a new tag, hence a new folder: its old entries are never
read, and are deleted when the tier opens.

**What the tier owns.** Only what it made. Its folder is marked by the file
``.aioloader-cache``, whose first line names the format; the tier marks an empty (or new)
folder and refuses any other folder with a clear error, so that it never deletes a user's
files. Inside its folder it touches only names it makes: 24-hex-digit shard folders,
entry files, and temporary files ``<entry>.tmp-<host>-<pid>-<random>``; anything else is
left alone.

**Sharing.** Several processes may share one folder (give each dataset its own: shard
folders of other versions are deleted). Each writer's temporary names are its own, and a
rename is atomic, so a reader sees no entry or a whole one, and two writers of an entry
write the same bytes. When the tier opens, a temporary file is deleted only if its writer
is gone: the process it names (by pid) is not alive on this host, or, for a writer on
another host or a pid that was reused, the file has not changed for ``TEMP_MAX_AGE`` (a
day; a write takes well under a second). A process counts the bound over the entries it
booked; an entry that another process deleted (evicted, or beyond its bound) is a miss.

The folder survives restarts: ``open`` finds the entries of the current shards again, up
to the bound (files beyond it are deleted). ``open``, ``write_now`` and ``read_now`` block;
``read_many`` and ``write`` go through ``aioloader._files`` (aiofiles on asyncio, anyio's
worker threads on trio), each open run to its end and each close shielded, so that a
cancellation never leaves a file open.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from ..._files import PIECE, open_file, read_file
from ...core import at_least
from .._concurrency import gather_ordered
from ._disk_folder import (
    ENTRY,
    FOLDER,
    TEMP,
    claim,
    entry_name,
    remove_entries,
    remove_if_abandoned,
    shard_folder,
    temp_for,
    unlink,
)
from ._planner import NEVER
from ._policy import Policy
from ._tiers import TierBook

__all__ = ("LOADED", "DiskTier", "check_disk")

LOADED = NEVER
"""The use stamp of an entry found on disk: among entries the plan does not read again,
those go first (their run's plan may not read them at all)."""


class DiskTier(TierBook):
    """Entries held as files under ``directory``, at most ``max_bytes`` of them.

    Creating one claims ``directory`` (see the module's docstring): it is created and
    marked if missing or empty, accepted if marked, refused otherwise.

    Args:
        directory: The tier's folder; give each dataset its own.
        max_bytes: Most bytes of entry files.
        policy: The eviction order.

    Raises:
        ValueError: ``directory`` holds files and is not a disk tier's folder.
    """

    def __init__(self, directory: Path, max_bytes: int, policy: Policy, span: int = 1) -> None:
        super().__init__(max_bytes, policy, span)
        self.directory = directory
        self.paths: dict[int, Path] = {}
        self.degraded = False  # an I/O error happened: no new entries (memory only)
        claim(directory)

    def open(
        self,
        folders: dict[str, str],
        locate: Callable[[str, int, int], int | None],
    ) -> None:
        """Find the entries left by earlier runs (blocking).

        They are ranked as not needed (``NEVER``) until the plan says otherwise, so an
        entry the current plan does not read can be evicted for one it does.

        Args:
            folders: ``{folder name: shard key}`` of the current shards.
            locate: ``locate(key, start, end)``: the sample whose span that is, or None.
        """
        claim(self.directory)
        for folder in sorted(self.directory.iterdir()):
            if TEMP.fullmatch(folder.name):
                remove_if_abandoned(folder)
                continue
            if not FOLDER.fullmatch(folder.name) or not folder.is_dir():
                continue  # the marker, or not ours: left alone
            key = folders.get(folder.name)
            if key is None:
                remove_entries(folder)  # an old version of a shard
                continue
            for path in sorted(folder.iterdir()):
                if TEMP.fullmatch(path.name):
                    remove_if_abandoned(path)
                    continue
                match = ENTRY.fullmatch(path.name)
                if match is None:
                    continue  # not ours
                start, end = int(match[1]), int(match[2])
                unit = locate(key, start, end)
                size = _size_of(path)
                if unit is None or size is None or unit in self.sizes or size != end - start:
                    unlink(path)  # a stale or damaged entry
                    continue
                if self.bytes + size > self.max_bytes:
                    unlink(path)  # the bound may have shrunk since the last run
                    continue
                self.add(unit, size)
                self.paths[unit] = path
                self.order.used(unit, LOADED)
                self.order.push(unit, NEVER)

    def path_for(self, unit: int, key: str, tag: str, start: int, end: int, data: bytes) -> Path:
        """Where ``unit``'s entry goes (its folder is created later, by ``write``)."""
        return self.directory / shard_folder(key, tag) / entry_name(start, end, data)

    @staticmethod
    def write_now(path: Path, data: bytes) -> None:
        """Write ``data`` to ``path`` atomically: temporary file, fsync, rename (blocking).

        On error the temporary file is removed and the error raised.
        """
        temp = temp_for(path)
        try:
            _make_folder(path.parent)
            with open(temp, "wb") as handle:
                handle.write(data)
                _flush_and_sync(handle)
            os.replace(temp, path)
        except BaseException:
            unlink(temp)
            raise

    @staticmethod
    async def write(path: Path, data: bytes) -> None:
        """``write_now`` without blocking the event loop: the bytes go in pieces through
        ``aioloader._files`` (aiofiles on asyncio), the close shielded from cancellation."""
        temp = temp_for(path)
        try:
            await anyio.to_thread.run_sync(_make_folder, path.parent)
            async with await open_file(temp, "wb") as handle:
                for k in range(0, len(data), PIECE):
                    await handle.write(data[k : k + PIECE] if len(data) > PIECE else data)
                await anyio.to_thread.run_sync(_flush_and_sync, handle.wrapped)
            await anyio.to_thread.run_sync(os.replace, temp, path)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(unlink, temp)
            raise

    @staticmethod
    def read_now(path: Path) -> bytes | None:
        """The entry's bytes if the file is whole and matches its name, else None (blocking)."""
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            return None
        return _checked(path, data)

    @staticmethod
    async def read_many(paths: dict[Any, Path]) -> dict[Any, bytes | None]:
        """``read_now`` of each path, read concurrently without blocking the event loop
        (``aioloader._files``: aiofiles on asyncio)."""
        items = list(paths.items())
        datas = await gather_ordered(_read, [path for _, path in items])
        return {unit: data for (unit, _), data in zip(items, datas, strict=True)}

    @staticmethod
    async def delete(path: Path) -> None:
        """Remove an evicted entry's file (a worker thread; gone already is fine)."""
        await anyio.to_thread.run_sync(unlink, path)


async def _read(path: Path) -> bytes | None:
    try:
        data = await read_file(path)
    except OSError:
        return None
    return _checked(path, data)


def _checked(path: Path, data: bytes) -> bytes | None:
    start, end, crc = path.name.split("-")
    if len(data) != int(end) - int(start) or f"{zlib.crc32(data):08x}" != crc:
        unlink(path)
        return None
    return data


def _make_folder(folder: Path) -> None:
    folder.mkdir(exist_ok=True)


def _flush_and_sync(handle: Any) -> None:
    handle.flush()
    os.fsync(handle.fileno())


def _size_of(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def check_disk(disk_dir: Any, value: Any) -> int:
    """``disk_bytes``, checked with ``disk_dir``: a folder and a bound >= 1 go together."""
    disk_bytes = at_least("disk_bytes", value, 0)
    if disk_dir is not None and not isinstance(disk_dir, (str, Path)):
        raise TypeError(f"disk_dir must be a str, a Path or None but got {disk_dir!r}")
    if disk_dir is not None and Path(disk_dir).exists() and not Path(disk_dir).is_dir():
        raise ValueError(f"disk_dir must be a folder but {str(disk_dir)!r} is a file")
    if (disk_dir is None) != (disk_bytes == 0):
        raise ValueError(
            "disk_dir and disk_bytes go together (a folder and a bound >= 1) but got "
            f"disk_dir={disk_dir!r}, disk_bytes={disk_bytes}"
        )
    return disk_bytes
