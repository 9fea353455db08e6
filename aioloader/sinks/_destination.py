"""Where shards go: a local folder, or a prefix in an obstore store. Blocking calls.

Both make an object appear whole or not at all. A local file is written under a hidden
partial name (``.{name}.partial-{pid}``), flushed to disk, then renamed into place; an
object store upload is atomic by itself (a multipart upload becomes visible only when it
completes). The writer runs these calls in worker threads.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import IO, Any

__all__ = ("Destination", "LocalDestination", "StoreDestination", "make_destination")

_PARTIAL = re.compile(r"^\..+\.partial-(\d+)$")


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (not this one: its partials are stale)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, but not ours to signal
        return True
    return True


class Destination:
    """The operations a shard writer needs; see ``LocalDestination``, ``StoreDestination``."""

    def describe(self, name: str) -> str:
        """Where ``name`` lives, for messages."""
        raise NotImplementedError

    def read(self, name: str) -> bytes | None:
        """The bytes of ``name``, or None when it does not exist."""
        raise NotImplementedError

    def exists(self, name: str) -> bool:
        """Whether ``name`` exists."""
        raise NotImplementedError

    def delete(self, name: str) -> None:
        """Remove ``name`` if it exists."""
        raise NotImplementedError

    def put_bytes(self, name: str, data: bytes) -> None:
        """Write ``name`` atomically."""
        raise NotImplementedError

    def open_spool(self, name: str) -> IO[bytes]:
        """A binary file to write the shard ``name`` into, before ``commit_spool``."""
        raise NotImplementedError

    def commit_spool(self, name: str, spool: IO[bytes], size: int) -> None:
        """Make the spooled shard appear as ``name``, whole; closes the spool."""
        raise NotImplementedError

    def abort_spool(self, name: str, spool: IO[bytes]) -> None:
        """Drop a spool that will not be committed."""
        raise NotImplementedError

    def clean_partials(self) -> int:
        """Remove what killed writers left half-written; the number removed."""
        return 0


class LocalDestination(Destination):
    """A local folder (created when missing)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalDestination({str(self.folder)!r})"

    def path(self, name: str) -> Path:
        """The path of ``name``."""
        return self.folder / name

    def describe(self, name: str) -> str:
        return str(self.path(name))

    def read(self, name: str) -> bytes | None:
        try:
            return self.path(name).read_bytes()
        except FileNotFoundError:
            return None

    def exists(self, name: str) -> bool:
        return self.path(name).exists()

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(name).unlink()

    def _partial(self, name: str) -> Path:
        target = self.path(name)
        return target.with_name(f".{target.name}.partial-{os.getpid()}")

    def put_bytes(self, name: str, data: bytes) -> None:
        partial = self._partial(name)
        with open(partial, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, self.path(name))
        self._sync_folder()

    def open_spool(self, name: str) -> IO[bytes]:
        return open(self._partial(name), "wb")  # closed by commit_spool or abort_spool

    def commit_spool(self, name: str, spool: IO[bytes], size: int) -> None:
        spool.flush()
        os.fsync(spool.fileno())
        spool.close()
        os.replace(self._partial(name), self.path(name))
        self._sync_folder()

    def abort_spool(self, name: str, spool: IO[bytes]) -> None:
        spool.close()
        with contextlib.suppress(FileNotFoundError):
            self._partial(name).unlink()

    def clean_partials(self) -> int:
        """Remove partial files of writers that no longer run (by process id)."""
        removed = 0
        for path in self.folder.iterdir():
            match = _PARTIAL.match(path.name)
            if match and path.is_file() and not _alive(int(match.group(1))):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed += 1
        return removed

    def _sync_folder(self) -> None:
        if os.name != "posix":  # pragma: no cover - Windows cannot open a directory
            return
        fd = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class StoreDestination(Destination):
    """A prefix in an obstore store (S3, GCS, Azure, local, memory).

    Shards are spooled in memory up to ``spool_memory`` bytes, then on a temporary file,
    and uploaded with a multipart upload when larger than ``part_size``.
    """

    def __init__(
        self,
        store: Any,
        prefix: str = "",
        *,
        part_size: int = 8 * 1024 * 1024,
        upload_concurrency: int = 8,
        spool_memory: int = 64 * 1024 * 1024,
    ) -> None:
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str but got {type(prefix).__name__}")
        if part_size < 5 * 1024 * 1024:
            raise ValueError(f"part_size must be >= 5 MiB (S3's minimum) but got {part_size}")
        self.store = store
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.part_size = part_size
        self.upload_concurrency = upload_concurrency
        self.spool_memory = spool_memory
        self.multipart_uploads = 0

    def __repr__(self) -> str:
        return f"StoreDestination({self.store!r}, prefix={self.prefix!r})"

    def key(self, name: str) -> str:
        """The object key of ``name``."""
        return self.prefix + name

    def describe(self, name: str) -> str:
        return f"{self.key(name)!r} in {self.store!r}"

    def read(self, name: str) -> bytes | None:
        import obstore

        try:
            return bytes(obstore.get(self.store, self.key(name)).bytes())
        except FileNotFoundError:
            return None

    def exists(self, name: str) -> bool:
        import obstore

        try:
            obstore.head(self.store, self.key(name))
        except FileNotFoundError:
            return False
        return True

    def delete(self, name: str) -> None:
        import obstore

        with contextlib.suppress(FileNotFoundError):
            obstore.delete(self.store, self.key(name))

    def put_bytes(self, name: str, data: bytes) -> None:
        import obstore

        obstore.put(self.store, self.key(name), data, use_multipart=False)

    def open_spool(self, name: str) -> IO[bytes]:
        return tempfile.SpooledTemporaryFile(max_size=self.spool_memory)

    def commit_spool(self, name: str, spool: IO[bytes], size: int) -> None:
        import obstore

        multipart = size > self.part_size
        try:
            spool.seek(0)
            obstore.put(
                self.store,
                self.key(name),
                spool,
                use_multipart=multipart,
                chunk_size=self.part_size,
                max_concurrency=self.upload_concurrency,
            )
        finally:
            spool.close()
        self.multipart_uploads += multipart

    def abort_spool(self, name: str, spool: IO[bytes]) -> None:
        spool.close()


def make_destination(destination: Any, store: Any, **options: Any) -> Destination:
    """The ``Destination`` for a writer's ``destination`` and ``store`` arguments."""
    if isinstance(destination, Destination):
        return destination
    if store is not None:
        if not isinstance(destination, str):
            raise TypeError(
                "destination must be a key prefix (str) when a store is given but got "
                f"{type(destination).__name__}"
            )
        return StoreDestination(store, destination, **options)
    if not isinstance(destination, (str, os.PathLike)) or not str(destination):
        raise TypeError(f"destination must be a folder path but got {destination!r}")
    return LocalDestination(destination)
