"""The disk tier's folder: the names it makes, and what it owns.

The tier owns only what it made. Its folder is marked by the file ``.aioloader-cache``,
whose first line names the format; ``claim`` marks an empty (or new) folder and refuses any
other folder with a clear error, so that the cache never deletes a user's files. Inside
its folder it touches only names it makes: 24-hex-digit shard folders (``shard_folder``),
entry files (``entry_name``), and temporary files ``<entry>.tmp-<host>-<pid>-<random>``
(``temp_for``); a temporary file is deleted only when its writer is gone.
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
from pathlib import Path

__all__ = (
    "ENTRY",
    "FOLDER",
    "FORMAT",
    "MARKER",
    "TEMP",
    "TEMP_MAX_AGE",
    "claim",
    "entry_name",
    "remove_entries",
    "remove_if_abandoned",
    "shard_folder",
    "temp_for",
    "unlink",
)

MARKER = ".aioloader-cache"
"""The file that marks a folder as a disk tier's own."""
FORMAT = "aioloader KnownFutureCache disk tier, format 2"
"""The marker's first line."""
TEMP_MAX_AGE = 24 * 3600.0
"""Seconds after which a temporary file of a writer that may be alive counts as abandoned."""

HOST_TAG = f"{zlib.crc32(socket.gethostname().encode()):08x}"
FOLDER = re.compile(r"[0-9a-f]{24}")
ENTRY = re.compile(r"(\d+)-(\d+)-[0-9a-f]{8}")
TEMP = re.compile(
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
    return path.with_name(f"{path.name}.tmp-{HOST_TAG}-{pid}-{secrets.token_hex(4)}")


def claim(directory: Path) -> None:
    """Make ``directory`` a disk tier's folder (create and mark it), or refuse it (blocking).

    Raises:
        ValueError: It holds files and no marker of this format.
    """
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / MARKER
    if _marked(marker):
        return
    others = sorted(p.name for p in directory.iterdir() if not TEMP.fullmatch(p.name))
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
        unlink(temp)


def _marked(marker: Path) -> bool:
    try:
        with open(marker, encoding="utf-8", errors="replace") as handle:
            return handle.readline().rstrip("\n") == FORMAT
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return False


def remove_if_abandoned(path: Path) -> None:
    """Delete a temporary file whose writer is gone (see the module's docstring)."""
    match = TEMP.fullmatch(path.name)
    assert match is not None
    if match[1] == HOST_TAG and not _alive(int(match[2])):
        unlink(path)
        return
    try:
        age = time.time() - path.stat().st_mtime
    except OSError:
        return
    if age > TEMP_MAX_AGE:
        unlink(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # alive (another user's), or not a pid we can judge: keep its file
    return True


def remove_entries(folder: Path) -> None:
    """Delete the entries and abandoned temporary files of ``folder``, then the folder if
    nothing else is left in it."""
    for path in folder.iterdir():
        if ENTRY.fullmatch(path.name):
            unlink(path)
        elif TEMP.fullmatch(path.name):
            remove_if_abandoned(path)
    with contextlib.suppress(OSError):
        folder.rmdir()


def unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
