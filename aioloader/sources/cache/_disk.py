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

import contextlib
import hashlib
import os
import re
import secrets
import socket
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from ..._files import PIECE, open_file, read_file
from .._concurrency import gather_ordered
from ._planner import NEVER
from ._policy import Policy
from ._tiers import TierBook

__all__ = ("MARKER", "TEMP_MAX_AGE", "DiskTier", "entry_name", "shard_folder")

MARKER = ".aioloader-cache"
"""The file that marks a folder as a disk tier's own."""
FORMAT = "aioloader KnownFutureCache disk tier, format 2"
"""The marker's first line."""
TEMP_MAX_AGE = 24 * 3600.0
"""Seconds after which a temporary file of a writer that may be alive counts as abandoned."""
LOADED = NEVER
"""The use stamp of an entry found on disk: among entries the plan does not read again,
those go first (their run's plan may not read them at all)."""

_HOST = f"{zlib.crc32(socket.gethostname().encode()):08x}"
_FOLDER = re.compile(r"[0-9a-f]{24}")
_ENTRY = re.compile(r"(\d+)-(\d+)-[0-9a-f]{8}")
_TEMP = re.compile(
    r"(?:\d+-\d+-[0-9a-f]{8}|\.aioloader-cache)"  # an entry's or the marker's
    r"\.tmp-([0-9a-f]{8})-(\d+)-[0-9a-f]{8}"  # host, pid, random
)


def shard_folder(key: str, tag: str) -> str:
    """The folder name of shard ``key`` at version ``tag``."""
    return hashlib.sha1(f"{key}\0{tag}".encode()).hexdigest()[:24]


def entry_name(start: int, end: int, data: bytes) -> str:
    """The file name of bytes ``[start, end)`` holding ``data``."""
    return f"{start}-{end}-{zlib.crc32(data):08x}"


def temp_for(path: Path, pid: int | None = None) -> Path:
    """A temporary name for ``path``, unique to its writer: this host, process ``pid``
    (default: this one), and a random part."""
    pid = os.getpid() if pid is None else pid
    return path.with_name(f"{path.name}.tmp-{_HOST}-{pid}-{secrets.token_hex(4)}")


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
            if _TEMP.fullmatch(folder.name):
                _remove_if_abandoned(folder)
                continue
            if not _FOLDER.fullmatch(folder.name) or not folder.is_dir():
                continue  # the marker, or not ours: left alone
            key = folders.get(folder.name)
            if key is None:
                _remove_entries(folder)  # an old version of a shard
                continue
            for path in sorted(folder.iterdir()):
                if _TEMP.fullmatch(path.name):
                    _remove_if_abandoned(path)
                    continue
                match = _ENTRY.fullmatch(path.name)
                if match is None:
                    continue  # not ours
                start, end = int(match[1]), int(match[2])
                unit = locate(key, start, end)
                size = _size_of(path)
                if unit is None or size is None or unit in self.sizes or size != end - start:
                    _unlink(path)  # a stale or damaged entry
                    continue
                if self.bytes + size > self.max_bytes:
                    _unlink(path)  # the bound may have shrunk since the last run
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
            _unlink(temp)
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
                await anyio.to_thread.run_sync(_unlink, temp)
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
        await anyio.to_thread.run_sync(_unlink, path)


async def _read(path: Path) -> bytes | None:
    try:
        data = await read_file(path)
    except OSError:
        return None
    return _checked(path, data)


def _checked(path: Path, data: bytes) -> bytes | None:
    start, end, crc = path.name.split("-")
    if len(data) != int(end) - int(start) or f"{zlib.crc32(data):08x}" != crc:
        _unlink(path)
        return None
    return data


def claim(directory: Path) -> None:
    """Make ``directory`` a disk tier's folder (create and mark it), or refuse it (blocking).

    Raises:
        ValueError: It holds files and no marker of this format.
    """
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / MARKER
    if _marked(marker):
        return
    others = sorted(p.name for p in directory.iterdir() if not _TEMP.fullmatch(p.name))
    if others:
        shown = ", ".join(repr(name) for name in others[:3]) + (", ..." if len(others) > 3 else "")
        raise ValueError(
            "disk_dir must be an empty folder or one a KnownFutureCache made (marked by its "
            f"{MARKER!r} file, format {FORMAT!r}), since the cache deletes the files in it, "
            f"but got {str(directory)!r}, which holds {len(others)} other entries ({shown})"
        )
    temp = temp_for(marker)
    try:
        temp.write_text(
            f"{FORMAT}\nThis folder is managed by aioloader's KnownFutureCache: it deletes the "
            "files in it. Delete the whole folder to clear the cache.\n"
        )
        os.replace(temp, marker)  # several processes may claim it at once: same content
    finally:
        _unlink(temp)


def _marked(marker: Path) -> bool:
    try:
        with open(marker, encoding="utf-8", errors="replace") as handle:
            return handle.readline().rstrip("\n") == FORMAT
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return False


def _remove_if_abandoned(path: Path) -> None:
    """Delete a temporary file whose writer is gone (see the module's docstring)."""
    match = _TEMP.fullmatch(path.name)
    assert match is not None
    if match[1] == _HOST and not _alive(int(match[2])):
        _unlink(path)
        return
    try:
        age = time.time() - path.stat().st_mtime
    except OSError:
        return
    if age > TEMP_MAX_AGE:
        _unlink(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # alive (another user's), or not a pid we can judge: keep its file
    return True


def _remove_entries(folder: Path) -> None:
    """Delete the entries and abandoned temporary files of ``folder``, then the folder if
    nothing else is left in it."""
    for path in folder.iterdir():
        if _ENTRY.fullmatch(path.name):
            _unlink(path)
        elif _TEMP.fullmatch(path.name):
            _remove_if_abandoned(path)
    with contextlib.suppress(OSError):
        folder.rmdir()


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


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
