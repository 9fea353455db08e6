"""Write samples into WebDataset tar shards, committed whole, listed in a manifest.

    async with TarShardWriter("out/", max_samples=1000) as writer:
        await writer.write("000000", {"jpg": jpeg, "json": b"{...}"}, position=0)
        writer.record_failure(FailureRecord(1, "status", "HTTP 404"))
        ...
    # out/shard-000000.tar, out/shard-000000.tar.index.json, out/manifest.json

Commit order: the shard (spooled, then renamed or uploaded whole), its index, its failure
records, and last the manifest (replaced atomically, and conditionally: only if it is still
the version this writer last wrote or read). One writer at a time: a writer takes the
destination's lease (``WriterLease``) when it opens and gives it up when it closes, so a
second writer on the same destination fails at once, naming the first.

A writer killed at any moment leaves a manifest that lists only complete shards; what it
left half-done is ignored on restart, and overwritten (shards are named by their number,
which restarts at the manifest's count).

Input positions: ``write`` and ``record_failure`` may carry the input position of what
they record. Positions must come in order without gaps, starting at ``next_position`` (0,
or where the manifest a resumed writer found ends). Each shard then covers a contiguous
range of inputs, and ``next_position`` after a restart says exactly which input comes
next: nothing is written twice and nothing is left out.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from .._errors import ResumeMismatchError, WriterConflictError
from .._files import PIECE, AsyncFile, open_with, run_to_end
from ..core import at_least, instance_not_bool, positive
from ..sources import ShardIndex, TarSampleEntry
from ._destination import Destination, VersionConflictError, make_destination
from ._lease import LEASE_NAME, WriterLease
from ._manifest import VERSION, FailureRecord, InputEnd, Manifest, ShardRecord
from ._tar_format import END_OF_ARCHIVE, check_field, check_key, member_header, padding

__all__ = ("MANIFEST_NAME", "TarShardWriter", "WriterStatistics")

MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class WriterStatistics:
    """Counters of a ``TarShardWriter``.

    Attributes:
        shards: Shards committed (the manifest's count, resumed ones included).
        samples: Samples in committed shards.
        failed: Failure records in committed shards.
        bytes: Bytes in committed shards.
        pending_samples: Samples written to the shard not yet committed.
        pending_failed: Failure records of the shard not yet committed.
        pending_bytes: Bytes of the shard not yet committed.
        multipart_uploads: Shards uploaded with a multipart upload.
    """

    shards: int
    samples: int
    failed: int
    bytes: int
    pending_samples: int
    pending_failed: int
    pending_bytes: int
    multipart_uploads: int


def _hash(digest: Any, pieces: list[bytes]) -> None:
    for piece in pieces:
        digest.update(piece)


@dataclass
class _Pending:
    """The shard being written: it gathers ``PIECE`` bytes on the event loop, then
    ``write_out`` hashes them in a worker thread and writes them to the spool through
    ``AsyncFile`` (aiofiles on asyncio): the loop never touches the file or the digest."""

    name: str
    first: int | None
    spool: AsyncFile | None = None  # opened by the first ``write_out``, in a worker thread
    size: int = 0
    digest: Any = field(default_factory=hashlib.sha256)
    entries: list[TarSampleEntry] = field(default_factory=list)
    failures: list[FailureRecord] = field(default_factory=list)
    gathered: list[bytes] = field(default_factory=list)
    gathered_bytes: int = 0

    def append(self, data: bytes) -> None:
        self.gathered.append(data)
        self.gathered_bytes += len(data)
        self.size += len(data)

    async def write_out(self, destination: Destination) -> None:
        """Hash the gathered pieces and append them to the spool, opening it first; each
        step in a worker thread. Shielded: an anyio cancellation lets it run to its end,
        so the digest and the spool hold the same bytes (a plain asyncio cancel cuts it
        short, and the writer then drops the shard)."""
        pieces, self.gathered, self.gathered_bytes = self.gathered, [], 0
        with anyio.CancelScope(shield=True):
            if self.spool is None:
                self.spool = await open_with(
                    lambda: destination.open_spool(self.name),
                    lambda spool: destination.abort_spool(self.name, spool),
                )
            await run_to_end(lambda: _hash(self.digest, pieces))
            await self.spool.writelines(pieces)

    def abort(self, destination: Destination) -> None:
        """(Blocking.) Close and drop the spool."""
        if self.spool is not None:
            destination.abort_spool(self.name, self.spool.wrapped)


class TarShardWriter:
    """Writes samples into WebDataset tar shards that ``TarShards`` reads, with a manifest.

    Args:
        destination: A local folder, or a key prefix when ``store`` is given.
        store: An obstore store to upload shards to; None writes local files.
        max_samples: Samples per shard; the shard is committed when it has this many.
        max_bytes: Bytes per shard (roughly: a shard is committed before a sample would
            take it past this size; a single sample larger than it gets a shard alone).
        name_pattern: ``str.format`` pattern of shard names, given the shard number.
        resume: Continue the shard set the destination's manifest describes (when it has
            one). Without it, a destination that has a manifest is refused.
        meta: JSON-serialisable facts for people stored in the manifest (the input's
            name); not compared on resume (a resume keeps the first run's).
        settings: JSON-serialisable settings that decide the output; a resumed writer
            refuses a manifest whose settings differ (``ResumeMismatchError`` naming each
            changed setting, old and new value).
        part_size: Part size of multipart uploads (object stores; shards larger than this
            are uploaded in parts).
        upload_concurrency: Parts uploaded at once.
        start_position: The first input position of an empty shard set (a worker that
            ingests inputs ``[start, stop)`` of a larger list starts at ``start``).
        on_commit: Called with each ``ShardRecord`` once the manifest lists it.
        lease_ttl: Seconds the writer lease lasts unless renewed (renewed on commits
            and writes after a third of it has passed).
    """

    def __init__(
        self,
        destination: str | os.PathLike[str] | Destination,
        *,
        store: Any = None,
        max_samples: int = 10_000,
        max_bytes: int = 256 * 1024 * 1024,
        name_pattern: str = "shard-{:06d}.tar",
        resume: bool = False,
        meta: Mapping[str, Any] | None = None,
        part_size: int = 8 * 1024 * 1024,
        upload_concurrency: int = 8,
        start_position: int = 0,
        on_commit: Callable[[ShardRecord], None] | None = None,
        settings: Mapping[str, Any] | None = None,
        lease_ttl: float = 600.0,
    ) -> None:
        if on_commit is not None and not callable(on_commit):
            raise TypeError(f"on_commit must be callable or None but got {on_commit!r}")
        self.on_commit = on_commit
        start_position = at_least("start_position", start_position, 0)
        self.max_samples = positive("max_samples", max_samples)
        self.max_bytes = positive("max_bytes", max_bytes)
        self.name_pattern = _check_name_pattern(name_pattern)
        options = {"part_size": part_size, "upload_concurrency": upload_concurrency}
        self.destination = make_destination(destination, store, **options)
        self.meta = dict(meta or {})
        self.settings = dict(settings or {})
        json.dumps([self.meta, self.settings])  # fails early on what a manifest cannot hold
        self._load_manifest(bool(resume))  # refuse early, before touching the destination
        self._lease = WriterLease(self.destination, lease_ttl)
        self._lease.acquire()
        try:  # read again under the lease: another writer may have committed meanwhile
            self._manifest, self._manifest_version = self._load_manifest(bool(resume))
            self.destination.clean_partials()
        except BaseException:
            self._lease.release()
            raise
        shards = self._manifest.shards
        self._next_position = self._manifest.end if shards else start_position
        self._tracked: bool | None = None if not shards else shards[-1].first is not None
        self._pending: _Pending | None = None
        self._digest: str | None = None
        self._closed = False

    def _load_manifest(self, resume: bool) -> tuple[Manifest, str | None]:
        found = self.destination.read_versioned(MANIFEST_NAME)
        if found is None:
            return Manifest((), self.meta, self.settings), None
        text, version = found
        where = self.destination.describe(MANIFEST_NAME)
        if not resume:
            raise FileExistsError(
                f"the destination already holds a manifest ({where}); pass resume=True to "
                "continue it, or write to an empty destination"
            )
        try:
            manifest = Manifest.from_json(text)
        except ValueError as exc:
            raise ValueError(f"cannot resume from {where}: {exc}") from None
        if manifest.version != VERSION:
            raise ResumeMismatchError(
                f"cannot resume from {where}: it is a version {manifest.version} manifest, "
                f"written before manifests recorded their settings and a fingerprint of "
                f"their input (version {VERSION}), so this run cannot check that it continues "
                "the same job; its shards stay readable: finish it with the aioloader "
                "version that wrote it, or write to a new output"
            )
        changed = _changed_settings(dict(manifest.settings), self.settings)
        if changed:
            raise ResumeMismatchError(
                f"cannot resume from {where}: settings that decide the output changed: "
                f"{changed} (resume with the settings it was written with, or write to a "
                "new output)"
            )
        return manifest, version

    def __repr__(self) -> str:
        return f"TarShardWriter({self.destination!r}, {len(self._manifest.shards)} shards)"

    @property
    def manifest(self) -> Manifest:
        """The manifest as last committed."""
        return self._manifest

    @property
    def next_position(self) -> int:
        """The input position the next ``write`` or ``record_failure`` must carry."""
        return self._next_position

    def statistics(self) -> WriterStatistics:
        """A snapshot of the counters."""
        pending = self._pending
        multipart = getattr(self.destination, "multipart_uploads", 0)
        return WriterStatistics(
            shards=len(self._manifest.shards),
            samples=self._manifest.total_samples,
            failed=self._manifest.total_failed,
            bytes=self._manifest.total_bytes,
            pending_samples=0 if pending is None else len(pending.entries),
            pending_failed=0 if pending is None else len(pending.failures),
            pending_bytes=0 if pending is None else pending.size,
            multipart_uploads=int(multipart),
        )

    def _check_position(self, position: int | None) -> None:
        if self._closed:
            raise RuntimeError("the TarShardWriter is closed")
        if position is not None:
            instance_not_bool("position", position, (int,), "an int or None")
        tracked = position is not None
        if self._tracked is not None and self._tracked != tracked:
            rule = "an int (earlier records carry one)"
            if not self._tracked:
                rule = "None (earlier records carry none)"
            raise ValueError(f"position must be {rule} but got {position!r}")
        if tracked and position != self._next_position:
            raise ValueError(
                f"position must be the next input position, {self._next_position}, but got "
                f"{position} (positions come in order, without gaps)"
            )

    def _consume_position(self, position: int | None, input_digest: str | None) -> None:
        self._tracked = position is not None
        if position is not None:
            self._next_position = position + 1
        self._digest = input_digest

    def _open_pending(self, position: int | None) -> _Pending:
        if self._pending is None:
            name = self.name_pattern.format(len(self._manifest.shards))
            self._pending = _Pending(name, position)
        return self._pending

    async def write(
        self,
        key: str,
        fields: Mapping[str, bytes],
        *,
        position: int | None = None,
        input_digest: str | None = None,
    ) -> None:
        """Add one sample: members ``{key}.{field}`` in the order of ``fields``.

        Commits the shard first when the sample would take it past ``max_bytes``, and
        after when it reaches ``max_samples``. ``input_digest``: the running hash of the
        inputs up to this one, recorded with the shard that ends here.
        """
        check_key(key)
        if not isinstance(fields, Mapping) or not fields:
            raise ValueError(f"fields of sample {key!r} must be a non-empty mapping but got "
                             f"{fields!r:.80}")  # fmt: skip
        members = [check_field(key, name, data) for name, data in fields.items()]
        blocks = [(member_header(f"{key}.{name}", len(data)), data) for name, data in members]
        size = sum(len(header) + len(data) + len(padding(len(data))) for header, data in blocks)
        self._check_position(position)
        pending = self._pending
        if (
            pending is not None
            and pending.entries
            and (pending.size + size + len(END_OF_ARCHIVE) > self.max_bytes)
        ):
            await self.commit()
        if self._lease.due():
            await anyio.to_thread.run_sync(self._lease.renew)
        self._consume_position(position, input_digest)
        pending = self._open_pending(position)
        entry_fields = []
        for (name, data), (header, _) in zip(members, blocks, strict=True):
            pending.append(header)
            entry_fields.append((name, pending.size, len(data)))
            pending.append(data)
            pending.append(padding(len(data)))
        pending.entries.append(TarSampleEntry(key, tuple(entry_fields)))
        if len(pending.entries) >= self.max_samples or pending.size >= self.max_bytes:
            await self.commit()
        elif pending.gathered_bytes >= PIECE:
            await self._write_out(pending)

    async def _write_out(self, pending: _Pending) -> None:
        """Hash and write what ``pending`` gathered, in worker threads (the loop goes on).

        An anyio cancellation leaves the shard whole: the write either never starts (the
        pieces stay gathered) or runs to its end. A plain asyncio ``task.cancel()`` passes
        the shield: the pending shard is dropped and the writer closed.
        """
        await anyio.lowlevel.checkpoint_if_cancelled()
        try:
            await pending.write_out(self.destination)
        except BaseException:  # an error, or a plain asyncio cancel (it passes shields)
            self._closed = True  # the pending shard is lost: do not write on
            self._pending = None
            await self._abort_pending(pending)
            raise

    async def _abort_pending(self, pending: _Pending) -> None:
        """Close and drop ``pending``'s spool in a worker thread, even when cancelled."""
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await run_to_end(lambda: pending.abort(self.destination))

    def record_failure(self, failure: FailureRecord, *, input_digest: str | None = None) -> None:
        """Add the failure record of an input that produced no sample (no I/O).

        ``input_digest``: as in ``write``.
        """
        if not isinstance(failure, FailureRecord):
            raise TypeError(f"failure must be a FailureRecord but got {type(failure).__name__}")
        self._check_position(failure.position)
        self._consume_position(failure.position, input_digest)
        self._open_pending(failure.position).failures.append(failure)

    async def commit(self) -> ShardRecord | None:
        """Commit the pending shard now (None when nothing is pending)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        pending.append(END_OF_ARCHIVE)
        first = pending.first
        end = None if first is None else self.next_position
        index = ShardIndex(pending.name, pending.size, "", tuple(pending.entries))
        failures = "".join(json.dumps(f.to_dict(), default=str) + "\n" for f in pending.failures)
        input_digest = self._digest

        def publish() -> ShardRecord:
            destination = self.destination
            assert pending.spool is not None
            record = ShardRecord(
                name=pending.name,
                samples=len(pending.entries),
                bytes=pending.size,
                sha256=pending.digest.hexdigest(),
                first=first,
                end=end,
                failed=len(pending.failures),
                input_digest=input_digest,
            )
            destination.commit_spool(pending.name, pending.spool.wrapped, pending.size)
            destination.put_bytes(record.index_name, index.to_json().encode())
            if failures:
                destination.put_bytes(record.failures_name, failures.encode())
            else:
                destination.delete(record.failures_name)  # a killed run's leftover
            self._publish_manifest(self._manifest.with_shard(record))
            return record

        try:
            await pending.write_out(self.destination)  # the last piece, and the shard's digest
            await anyio.lowlevel.checkpoint_if_cancelled()
            record = await run_to_end(publish)
        except BaseException:
            self._closed = True  # the manifest on disk is the truth; do not write on
            await self._abort_pending(pending)
            raise
        if self.on_commit is not None:
            self.on_commit(record)
        return record

    def _publish_manifest(self, manifest: Manifest) -> None:
        """Write ``manifest`` if the stored one is still the one this writer knows."""
        if self._lease.due():
            self._lease.renew()
        try:
            self._manifest_version = self.destination.put_conditional(
                MANIFEST_NAME, manifest.to_json().encode(), self._manifest_version
            )
        except VersionConflictError as exc:
            raise WriterConflictError(
                f"another writer changed {exc.where} since this writer read it (expected "
                f"version {exc.expected!r}, found {exc.found!r}); stopping so neither "
                "writer's shards are lost"
            ) from None
        self._manifest = manifest

    async def mark_input_end(self, input_end: InputEnd) -> Manifest:
        """Commit what is pending, then record in the manifest where the input ended."""
        await self.commit()
        if self._closed:
            raise RuntimeError("the TarShardWriter is closed")
        manifest = self._manifest.with_input_end(input_end)
        await anyio.to_thread.run_sync(self._publish_manifest, manifest)
        return self._manifest

    async def close(self) -> Manifest:
        """Commit what is pending, remove leftovers of killed runs, return the manifest."""
        if self._closed:
            return self._manifest
        try:
            await self.commit()
            self._closed = True
            await anyio.to_thread.run_sync(self._remove_unlisted)
        finally:
            self._closed = True
            await anyio.to_thread.run_sync(self._lease.release)
        return self._manifest

    def _remove_unlisted(self) -> None:
        number = len(self._manifest.shards)
        while True:
            name = self.name_pattern.format(number)
            if not self.destination.exists(name):
                return
            for leftover in (name, f"{name}.index.json", f"{name}.failures.jsonl"):
                self.destination.delete(leftover)
            number += 1

    def abort(self) -> None:
        """Drop the pending shard without committing it; the writer is closed."""
        pending, self._pending = self._pending, None
        self._closed = True
        try:
            if pending is not None:
                pending.abort(self.destination)
        finally:
            with contextlib.suppress(Exception):  # the lease expires if this fails
                self._lease.release()

    async def __aenter__(self) -> TarShardWriter:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            await self.close()
        else:
            self.abort()


def _changed_settings(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """``"name was X and is now Y; ..."`` for each setting that differs ("" when none)."""
    missing = object()
    changes = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name, missing), new.get(name, missing)
        if before != after:
            was = "unset" if before is missing else repr(before)
            now = "unset" if after is missing else repr(after)
            changes.append(f"{name} was {was} and is now {now}")
    return "; ".join(changes)


def _check_name_pattern(name_pattern: Any) -> str:
    """``name_pattern`` if it formats a plain, distinct name for each shard number."""
    if not isinstance(name_pattern, str):
        raise TypeError(f"name_pattern must be a str but got {type(name_pattern).__name__}")
    try:
        first_name, second_name = name_pattern.format(0), name_pattern.format(1)
    except (IndexError, KeyError, ValueError) as exc:
        raise ValueError(
            f"name_pattern must format one shard number, like 'shard-{{:06d}}.tar', but "
            f"{name_pattern!r} fails: {exc}"
        ) from None
    if first_name in (second_name, MANIFEST_NAME, LEASE_NAME) or "/" in first_name:
        raise ValueError(
            "name_pattern must give each shard number its own plain name (no '/') but "
            f"{name_pattern!r} gives {first_name!r} for shard 0"
        )
    return name_pattern
