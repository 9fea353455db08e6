"""Where shards go: a local folder, or a prefix in an obstore store. Blocking calls.

Both make an object appear whole or not at all. A local file is written under a hidden
partial name (``.{name}.partial-{host}-{pid}``), flushed to disk, then renamed into place;
an object store upload is atomic by itself (a multipart upload becomes visible only when it
completes). The writer runs these calls in worker threads, and writes a shard's spool in
pieces (``aioloader._files``: aiofiles on asyncio, anyio's threads on trio).

Both also write conditionally (``put_conditional``): create only when absent, or replace
only the version this writer read, so two writers on one destination cannot overwrite each
other's manifest unnoticed. On object stores that is ``If-None-Match: *`` and
``If-Match: <etag>`` (obstore's ``PutMode``); on a local folder, a compare-and-replace
under an exclusive ``flock`` of the folder.

What a killed writer left behind is cleaned up by the next one (``clean_partials``): local
partial files of dead processes of this host (another host's partials are left and
reported: its process may be alive), and, on S3, multipart uploads left pending under the
prefix (listed and aborted; see ``aioloader.sinks._s3_uploads``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import socket
import tempfile
from pathlib import Path
from typing import IO, Any

from ._store_errors import VersionConflictError, store_error, store_failure

__all__ = (
    "Destination",
    "LocalDestination",
    "StoreDestination",
    "VersionConflictError",
    "host_name",
    "make_destination",
    "process_alive",
)

_LOG = logging.getLogger("aioloader.sinks")
_PARTIAL = re.compile(r"^\..+\.partial-(?:(?P<host>[A-Za-z0-9_.]+)-)?(?P<pid>\d+)$")


def host_name() -> str:
    """This machine's name as partial files and leases carry it (letters, digits, ``_.``)."""
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "localhost"


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (this process counts as alive)."""
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

    def read_versioned(self, name: str) -> tuple[bytes, str] | None:
        """``(bytes, version)`` of ``name``, or None when it does not exist."""
        raise NotImplementedError

    def put_conditional(self, name: str, data: bytes, expected: str | None) -> str:
        """Write ``name`` atomically if it is still as expected; its new version.

        ``expected`` None: only if ``name`` does not exist; else only if its version is
        ``expected``. Raises ``VersionConflictError`` otherwise.
        """
        raise NotImplementedError

    def open_spool(self, name: str) -> IO[bytes]:
        """A binary file to write the shard ``name`` into, before ``commit_spool``.

        The writer opens it in a worker thread and writes it in pieces of 1 MiB, each in a
        worker thread (through aiofiles on asyncio when it is a file of ``open``).
        """
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

    kept_partials: tuple[str, ...] = ()
    """Leftovers ``clean_partials`` saw but left (another host's), for reports."""


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
        return target.with_name(f".{target.name}.partial-{host_name()}-{os.getpid()}")

    def put_bytes(self, name: str, data: bytes) -> None:
        self._replace(name, data)

    def _replace(self, name: str, data: bytes) -> None:
        partial = self._partial(name)
        with open(partial, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, self.path(name))
        self._sync_folder()

    def read_versioned(self, name: str) -> tuple[bytes, str] | None:
        data = self.read(name)
        return None if data is None else (data, hashlib.sha256(data).hexdigest())

    def put_conditional(self, name: str, data: bytes, expected: str | None) -> str:
        import fcntl

        folder = os.open(self.folder, os.O_RDONLY)  # the lock: an flock of the folder
        try:
            fcntl.flock(folder, fcntl.LOCK_EX)
            current = self.read_versioned(name)
            found = None if current is None else current[1]
            if found != expected:
                raise VersionConflictError(self.describe(name), expected, found)
            self._replace(name, data)
        finally:
            os.close(folder)  # releases the lock
        return hashlib.sha256(data).hexdigest()

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
        """Remove partial files of this host's writers that no longer run.

        A partial written by another host is left (its writer may be alive; a process id
        means nothing here) and listed in ``kept_partials``, with a logged warning.
        Partials of this process are stale too: its writer holds the lease.
        """
        removed, kept = 0, []
        here = host_name()
        for path in sorted(self.folder.iterdir()):
            match = _PARTIAL.match(path.name)
            if not match or not path.is_file():
                continue
            host, pid = match.group("host") or here, int(match.group("pid"))
            if host != here:
                kept.append(path.name)
            elif pid == os.getpid() or not process_alive(pid):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed += 1
        self.kept_partials = tuple(kept)
        if kept:
            _LOG.warning(
                "left %d partial file(s) of other hosts in %s (their writers may be alive): %s",
                len(kept), self.folder, ", ".join(kept),
            )  # fmt: skip
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
        config = getattr(self.store, "config", None)
        scheme = {"S3Store": "s3", "GCSStore": "gs", "AzureStore": "az"}.get(
            type(self.store).__name__
        )
        bucket = config.get("bucket") or config.get("container_name") if config else None
        if scheme and bucket:
            store_prefix = str(getattr(self.store, "prefix", None) or "").strip("/")
            return (
                f"{scheme}://{bucket}/"
                + (f"{store_prefix}/" if store_prefix else "")
                + (self.key(name))
            )
        return f"{self.key(name)!r} in {self.store!r}"

    def read(self, name: str) -> bytes | None:
        found = self.read_versioned(name)
        return None if found is None else found[0]

    def read_versioned(self, name: str) -> tuple[bytes, str] | None:
        import obstore

        try:
            result = obstore.get(self.store, self.key(name))
            return bytes(result.bytes()), str(result.meta.get("e_tag") or "")
        except Exception as exc:
            error = store_error(exc, "read", self.describe(name))
            if error is None:
                return None
            raise error from None

    def exists(self, name: str) -> bool:
        import obstore

        try:
            obstore.head(self.store, self.key(name))
        except Exception as exc:
            error = store_error(exc, "look up", self.describe(name))
            if error is None:
                return False
            raise error from None
        return True

    def delete(self, name: str) -> None:
        import obstore

        try:
            obstore.delete(self.store, self.key(name))
        except Exception as exc:
            error = store_error(exc, "delete", self.describe(name))
            if error is not None:
                raise error from None

    def put_bytes(self, name: str, data: bytes) -> None:
        import obstore

        try:
            obstore.put(self.store, self.key(name), data, use_multipart=False)
        except Exception as exc:
            raise store_failure(exc, "write", self.describe(name)) from None

    def put_conditional(self, name: str, data: bytes, expected: str | None) -> str:
        import obstore

        mode: Any = "create" if expected is None else {"e_tag": expected}
        try:
            result = obstore.put(self.store, self.key(name), data, mode=mode)
        except NotImplementedError:  # a store without If-Match (obstore's LocalStore)
            return self._compare_then_put(name, data, expected)
        except Exception as exc:
            if type(exc).__name__ in ("AlreadyExistsError", "PreconditionError"):
                current = self.read_versioned(name)
                found = None if current is None else current[1]
                raise VersionConflictError(self.describe(name), expected, found) from None
            raise store_failure(exc, "write", self.describe(name)) from None
        return str(result.get("e_tag") or "")

    def _compare_then_put(self, name: str, data: bytes, expected: str | None) -> str:
        """Check the version, then overwrite: not atomic, but the lease keeps writers apart."""
        import obstore

        current = self.read_versioned(name)
        found = None if current is None else current[1]
        if found != expected:
            raise VersionConflictError(self.describe(name), expected, found)
        try:
            result = obstore.put(self.store, self.key(name), data, use_multipart=False)
        except Exception as exc:
            raise store_failure(exc, "write", self.describe(name)) from None
        return str(result.get("e_tag") or "")

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
        except Exception as exc:
            raise store_failure(exc, "upload", self.describe(name)) from None
        finally:
            spool.close()
        self.multipart_uploads += multipart

    def abort_spool(self, name: str, spool: IO[bytes]) -> None:
        spool.close()

    def clean_partials(self) -> int:
        """Abort the multipart uploads left pending under the prefix; the number aborted.

        Only S3 stores with static credentials can list them (the S3 API calls
        ListMultipartUploads and AbortMultipartUpload, signed here); for other stores
        nothing is listed and a lifecycle rule must remove what crashed uploads left.
        The caller holds the destination's lease, so no pending upload is a live one.
        """
        from ._s3_uploads import S3Uploads

        uploads = S3Uploads.for_store(self.store)
        if uploads is None:
            _LOG.info("cannot list pending multipart uploads of %r", self.store)
            return 0
        aborted = 0
        for key, upload_id in uploads.pending(self.prefix):
            if "/" not in key[len(self.prefix) :]:  # this prefix's own objects only
                uploads.abort(key, upload_id)
                aborted += 1
        return aborted


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
