"""Local files read or written in pieces, each piece in a worker thread: aiofiles on asyncio.

A neutral module: the sources (``LocalFiles``, the cache's disk tier) and the sinks (the
shard writer's spool) all read or write files this way, and a sink may not reach into a
source's private modules (docs/architecture.md).

Why not aiofiles alone: aiofiles runs each call with asyncio's ``run_in_executor``, so it
needs a running asyncio loop; on trio it fails (``RuntimeError: no running event loop``).
On trio, anyio's ``AsyncFile`` does the same work in trio's worker threads. ``AsyncFile``
below hides the choice (``aioloader._event_loops.file_calls`` makes it, and ``run_to_end``
is that module's), so a caller writes one async code path for asyncio, uvloop and trio.

Cancellation never leaves a file open, nor a thread still using it once the cancelled
call is over. anyio cancels every await of a cancelled scope, ``close`` included, so
``AsyncFile.aclose`` is shielded. A plain asyncio ``task.cancel()`` (``asyncio.wait_for``,
a ``TaskGroup``, the sources' ``gather_ordered``) goes through anyio's shields and would
abandon a worker thread, and the file it opens or closes with it; so the calls that open
or close a file (``run_to_end``) wait for their thread, even then, and close what it
opened for a caller that is gone. On asyncio these calls run in the loop's default
executor, as aiofiles' do.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterable
from typing import IO, Any, Literal, TypeVar

import anyio

from ._event_loops import file_calls, run_to_end

__all__ = ("PIECE", "AsyncFile", "open_file", "open_with", "read_file", "run_to_end")

PIECE = 1 << 20
"""Bytes per worker-thread call when a file is read or written in pieces."""

T = TypeVar("T")

BinaryMode = Literal["rb", "wb", "ab", "r+b", "xb"]


class AsyncFile:
    """A binary file whose calls run in a worker thread; ``aclose`` it (or ``async with``).

    On asyncio (and uvloop) reads and writes go through aiofiles when it can wrap the file
    (a buffered file of ``open``), on trio (or for other file objects) through
    ``anyio.AsyncFile``.

    Attributes:
        wrapped: The blocking file object, for calls that belong together in one thread
            call (``flush`` and ``fsync`` before a rename, say).
    """

    def __init__(self, wrapped: IO[bytes]) -> None:
        self.wrapped = wrapped
        self._calls: Any
        self._calls = file_calls(wrapped)

    def __repr__(self) -> str:
        return f"AsyncFile({self.wrapped!r})"

    async def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all that is left when ``size`` < 0); b"" at the end."""
        data: bytes = await self._calls.read(size)
        return data

    async def readinto(self, buffer: memoryview) -> int:
        """Read into ``buffer``; the number of bytes read (0 at the end)."""
        count: int = await self._calls.readinto(buffer)
        return count

    async def write(self, data: bytes) -> int:
        """Write ``data``; the number of bytes written."""
        written: int = await self._calls.write(data)
        return written

    async def writelines(self, pieces: Iterable[bytes]) -> None:
        """Write ``pieces`` one after another, in one worker-thread call."""
        await self._calls.writelines(pieces)

    async def aclose(self) -> None:
        """Close the file, even in a cancelled scope (shielded, and run to its end).

        A read or write that a plain asyncio cancel abandoned may still run in its thread;
        a buffered file's close waits for it.
        """
        with anyio.CancelScope(shield=True):
            await run_to_end(self.wrapped.close)

    async def __aenter__(self) -> AsyncFile:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _close(handle: IO[bytes] | None) -> None:
    if handle is not None:
        handle.close()


async def open_with(
    opener: Callable[[], IO[bytes]], discard: Callable[[IO[bytes]], object] = _close
) -> AsyncFile:
    """The file ``opener()`` opens in a worker thread, as an ``AsyncFile``.

    The open runs to its end even when the caller is cancelled; a caller that is gone
    by then never gets the file, which is passed to ``discard`` (by default: closed).
    """
    return AsyncFile(await run_to_end(opener, discard))


async def open_file(path: str | os.PathLike[str], mode: BinaryMode = "rb") -> AsyncFile:
    """Open ``path`` in a worker thread, as an ``AsyncFile`` (see ``open_with``).

    Errors are ``open``'s (``FileNotFoundError``, ``PermissionError``...).
    """
    return await open_with(lambda: open(path, mode))


def _open_and_read(
    path: str | os.PathLike[str], piece: int
) -> tuple[bytes | int, IO[bytes] | None]:
    """(In a worker thread.) ``(data, None)``: all bytes of a file no larger than ``piece``,
    closed; else ``(size, file)``: the size of a larger file, and the file, open."""
    handle = open(path, "rb")  # noqa: SIM115 - closed below, or by the caller
    keep = False
    try:
        size = os.fstat(handle.fileno()).st_size
        keep = size > piece
        return (size, handle) if keep else (handle.read(), None)
    finally:
        if not keep:
            handle.close()


async def read_file(path: str | os.PathLike[str], piece: int = PIECE) -> bytes:
    """All bytes of ``path``, read in pieces of ``piece`` bytes, each in a worker thread.

    A file no larger than one piece (the common case) costs one call: open, read, close.
    A larger one is read on through ``AsyncFile``, piece by piece, straight into the
    buffer of the bytes returned (no copy of the whole), and is closed even when the
    caller is cancelled. Errors are ``open``'s and ``read``'s (``FileNotFoundError``,
    ``IsADirectoryError``...).
    """
    found, handle = await run_to_end(
        lambda: _open_and_read(path, piece), lambda done: _close(done[1])
    )
    if handle is None:
        assert isinstance(found, bytes)
        return found
    assert isinstance(found, int)
    async with AsyncFile(handle) as rest:
        return await _read_rest(rest, found, piece)


async def _read_rest(file: AsyncFile, size: int, piece: int) -> bytes:
    """What is left of ``file`` (``size`` bytes when it did not change since its size was
    taken), read in pieces into one buffer that becomes the bytes returned."""
    buffer = io.BytesIO(bytes(size))  # untouched zero pages; BytesIO adopts them uncopied
    view = buffer.getbuffer()
    filled = 0
    try:
        while filled < size:
            count = await file.readinto(view[filled : filled + piece])
            if not count:  # the file shrank since its size was taken
                return bytes(view[:filled])
            filled += count
    finally:
        view.release()
    grown = await file.read()  # the file grew since its size was taken: the rest
    return buffer.getvalue() + grown if grown else buffer.getvalue()
