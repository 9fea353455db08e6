"""Index of a tar shard in WebDataset layout, built by reading the tar headers ourselves.

Formats: ustar (with its 155-byte name prefix), GNU long names (``L``) and long link names
(``K``, skipped), pax extended headers (``x``: ``path`` and ``size`` are honoured) and global
pax headers (``g``). Numbers may be octal or GNU base-256. Every header checksum is checked.
Directories, links, devices, FIFOs and GNU volume labels (``V``, ``tar --label``) are skipped:
they are metadata, not samples. Sparse files are refused (``MalformedShardError`` naming the
shard and the member), in both encodings: GNU's ``S`` type and pax headers with
``GNU.sparse.*`` records (``tar --sparse --format=posix``), whose data is a sparse map plus
the non-hole bytes, not the file. So are GNU multi-volume continuations (``M``), which hold
only the tail of a file. Any other type is read as a regular file, as POSIX asks.

Grouping, as WebDataset does it: ``dir/name.ext`` belongs to sample key ``dir/name`` as
field ``ext``; the key ends at the first dot of the base name, so ``a/b.seg.png`` is key
``a/b``, field ``seg.png``. Members without a field (no dot, or a name starting with a dot)
are skipped. A leading ``./`` is dropped.

Member names are never used as file system paths. Even so, names that are absolute (start
with ``/``) or have a ``..`` component are **rejected** (``MalformedShardError``): such a
shard was not written for this layout, and failing beats guessing. A field that appears twice
for one key, or a key whose members are not contiguous, is an error too.

A shard that ends inside a header or a member's data is truncated (``MalformedShardError``),
and so is one that ends after a member without the zero block that ends a tar archive: GNU
tar and Python's tarfile accept that, but a cut at a member boundary would then lose the
rest of the shard (or a sample's later fields) without a word.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path

from .._errors import MalformedShardError

__all__ = ("ShardIndex", "TarMember", "TarSampleEntry", "build_index", "iter_members", "split_name")

BLOCK = 512
INDEX_VERSION = 1
_ZERO_BLOCK = bytes(BLOCK)
_SKIPPED_TYPES = frozenset(b"123456V")  # links, devices, directories, FIFOs, volume labels
_SPARSE_PAX_PREFIX = "GNU.sparse."
_WRITES = itertools.count()  # with pid and thread: a temporary name no other write uses
_META_TYPES = (b"L", b"K", b"x", b"g")


@dataclass(frozen=True)
class TarMember:
    """A regular file in a shard: its name, where its data starts, and its size."""

    name: str
    offset: int
    size: int


@dataclass(frozen=True)
class TarSampleEntry:
    """One sample: its key and its fields as ``(field, offset, size)``, in shard order."""

    key: str
    fields: tuple[tuple[str, int, int], ...]

    @property
    def span(self) -> tuple[int, int]:
        """``[start, end)`` byte range covering every field (one ranged read)."""
        return self.fields[0][1], max(offset + size for _, offset, size in self.fields)


@dataclass(frozen=True)
class ShardIndex:
    """The samples of one shard, plus the shard's size and version tag when indexed."""

    shard: str
    size: int
    tag: str
    samples: tuple[TarSampleEntry, ...]

    def to_json(self) -> str:
        """JSON text of the index."""
        samples = [[s.key, [list(f) for f in s.fields]] for s in self.samples]
        payload = {"version": INDEX_VERSION, "shard": self.shard, "size": self.size}
        payload.update(tag=self.tag, samples=samples)
        return json.dumps(payload, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> ShardIndex:
        """Parse ``to_json`` output; raises ``ValueError`` on any other content."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != INDEX_VERSION:
            raise ValueError("not an index of this version")
        samples = tuple(
            TarSampleEntry(str(key), tuple((str(f), int(o), int(n)) for f, o, n in fields))
            for key, fields in data["samples"]
        )
        return ShardIndex(str(data["shard"]), int(data["size"]), str(data["tag"]), samples)


def _number(field: bytes, shard: str, offset: int, what: str) -> int:
    if field and field[0] & 0x80:  # GNU base-256
        value = int.from_bytes(field[1:], "big")
        if field[0] == 0xFF:
            value -= 256 ** (len(field) - 1)
        else:
            value += (field[0] & 0x7F) << (8 * (len(field) - 1))
        return value
    text = field.split(b"\0", 1)[0].strip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise MalformedShardError(
            f"shard {shard!r}: header at byte {offset} has a bad {what} field {field!r}"
        ) from None


def _text(raw: bytes, shard: str, offset: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedShardError(
            f"shard {shard!r}: member name at byte {offset} is not UTF-8: {raw!r}"
        ) from None


def _pax_records(data: bytes, shard: str, offset: int) -> dict[str, str]:
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        if data[pos:].strip(b"\0") == b"":
            break
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError:
            length = 0
        record = data[space + 1 : pos + length]
        if space < 0 or length <= 0 or not record.endswith(b"\n") or b"=" not in record:
            raise MalformedShardError(f"shard {shard!r}: bad pax header at byte {offset}")
        name, value = record[:-1].split(b"=", 1)
        records[name.decode("utf-8", "replace")] = _text(value, shard, offset)
        pos += length
    return records


def _header_name(header: bytes, shard: str, offset: int) -> str:
    """The member name stored in a header block (with the ustar prefix, if any)."""
    name = _text(header[:100].split(b"\0", 1)[0], shard, offset)
    if header[257:263] == b"ustar\0":
        prefix = _text(header[345:500].split(b"\0", 1)[0], shard, offset)
        name = f"{prefix}/{name}" if prefix else name
    return name


def _read_header(
    read: Callable[[int, int], bytes], pos: int, size: int, shard: str
) -> bytes | None:
    """The header block at ``pos``, its checksum checked, or None at the zero block that
    ends the archive; a shard that ends first raises."""
    if pos == size:
        # Without the end-of-archive block a cut at a member boundary would look whole
        # and silently lose the samples (or fields) after it: refuse it.
        raise MalformedShardError(
            f"shard {shard!r} is truncated: it ends at byte {size} after a member, "
            "without the zero block that ends a tar archive"
        )
    if pos + BLOCK > size:
        raise MalformedShardError(
            f"shard {shard!r} is truncated: a header at byte {pos} needs {BLOCK} bytes "
            f"but the shard ends at byte {size}"
        )
    header = read(pos, BLOCK)
    if header == _ZERO_BLOCK:
        return None
    unsigned = sum(header[:148]) + 8 * 32 + sum(header[156:])
    signed = unsigned - 2 * sum(b for b in header[:148] + header[156:] if b >= 128)
    try:
        checksum: int | None = _number(header[148:156], shard, pos, "checksum")
    except MalformedShardError:
        checksum = None
    if checksum not in (unsigned, signed):
        raise MalformedShardError(
            f"shard {shard!r}: header at byte {pos} fails its checksum (stored "
            f"{header[148:156]!r}, computed {unsigned}): not a tar archive, or corrupt"
        )
    return header


def _data_size(
    header: bytes, pax: dict[str, str], pax_global: dict[str, str], shard: str, pos: int, size: int
) -> int:
    """Bytes of data of the member whose header is at ``pos`` (a pax ``size`` wins), checked
    to fit in the shard."""
    data_size = _number(header[124:136], shard, pos, "size")
    if header[156:157] not in _META_TYPES and ("size" in pax or "size" in pax_global):
        declared = pax.get("size", pax_global.get("size", ""))
        if not declared.isdigit():
            raise MalformedShardError(
                f"shard {shard!r}: pax size {declared!r} before byte {pos} is not a number"
            )
        data_size = int(declared)
    if data_size < 0:
        raise MalformedShardError(f"shard {shard!r}: header at byte {pos} has size < 0")
    start = pos + BLOCK
    if start + data_size > size:
        raise MalformedShardError(
            f"shard {shard!r} is truncated: member at byte {pos} needs {data_size} bytes "
            f"of data from byte {start} but the shard ends at byte {size}"
        )
    return data_size


def _unreadable_gnu(typeflag: bytes, name: str, shard: str, offset: int) -> MalformedShardError:
    """The error for a GNU sparse file (``S``) or multi-volume continuation (``M``)."""
    what = "a GNU sparse file" if typeflag == b"S" else "a GNU multi-volume continuation"
    return MalformedShardError(
        f"shard {shard!r}: member {name!r} at byte {offset} is {what}, "
        "which TarShards does not read; write the shard without --sparse/--multi-volume"
    )


def _refuse_sparse_pax(
    name: str, pax: dict[str, str], pax_global: dict[str, str], shard: str, offset: int
) -> None:
    """Raise for a member that ``GNU.sparse.*`` pax records make a sparse file (its data is
    a sparse map and the non-hole bytes, not the file)."""
    sparse = sorted(k for k in (*pax, *pax_global) if k.startswith(_SPARSE_PAX_PREFIX))
    if sparse:
        raise MalformedShardError(
            f"shard {shard!r}: member {pax.get('GNU.sparse.name', name)!r} at byte "
            f"{offset} is a sparse file (pax records {', '.join(sparse)}), "
            "which TarShards does not read; write the shard without --sparse"
        )


def iter_members(read: Callable[[int, int], bytes], size: int, shard: str) -> Iterator[TarMember]:
    """The regular files of a tar archive of ``size`` bytes, read through ``read(offset, n)``."""
    pos = 0
    long_name: str | None = None
    pax: dict[str, str] = {}
    pax_global: dict[str, str] = {}
    while True:
        header = _read_header(read, pos, size, shard)
        if header is None:
            return
        typeflag = header[156:157]
        data_size = _data_size(header, pax, pax_global, shard, pos, size)
        start = pos + BLOCK
        pos = start + -(-data_size // BLOCK) * BLOCK
        if typeflag == b"L":
            long_name = _text(read(start, data_size).split(b"\0", 1)[0], shard, start)
        elif typeflag == b"x":
            pax = _pax_records(read(start, data_size), shard, start)
        elif typeflag == b"g":
            pax_global.update(_pax_records(read(start, data_size), shard, start))
        elif typeflag in (b"S", b"M"):
            name = long_name or _header_name(header, shard, start - BLOCK)
            raise _unreadable_gnu(typeflag, name, shard, start - BLOCK)
        elif typeflag == b"K":
            pass  # a long link target: only links use it, and links are skipped
        elif typeflag[0] in _SKIPPED_TYPES:
            long_name, pax = None, {}
        else:
            name = pax.get("path") or long_name or _header_name(header, shard, start - BLOCK)
            _refuse_sparse_pax(name, pax, pax_global, shard, start - BLOCK)
            yield TarMember(name, start, data_size)
            long_name, pax = None, {}


def split_name(name: str, shard: str) -> tuple[str, str] | None:
    """(key, field) of a member name, or None when it has no field; unsafe names raise."""
    while name.startswith("./"):
        name = name[2:]
    if name.startswith("/") or ".." in name.split("/"):
        raise MalformedShardError(
            f"shard {shard!r}: member name {name!r} is absolute or has a '..' component; "
            "TarShards rejects such names"
        )
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot <= slash or dot == len(name) - 1:
        return None
    return name[:dot], name[dot + 1 :]


def group_samples(members: Iterator[TarMember], shard: str) -> tuple[TarSampleEntry, ...]:
    """Group members into samples by key; duplicate fields and split keys raise."""
    samples: list[TarSampleEntry] = []
    seen: set[str] = set()
    key: str | None = None
    fields: list[tuple[str, int, int]] = []
    for member in members:
        parts = split_name(member.name, shard)
        if parts is None:
            continue
        member_key, field = parts
        if member_key != key:
            if key is not None:
                samples.append(TarSampleEntry(key, tuple(fields)))
            if member_key in seen:
                raise MalformedShardError(
                    f"shard {shard!r}: key {member_key!r} appears again at member "
                    f"{member.name!r} after other keys; a sample's members must be contiguous"
                )
            seen.add(member_key)
            key, fields = member_key, []
        if any(existing == field for existing, _, _ in fields):
            raise MalformedShardError(
                f"shard {shard!r}: duplicate member {member.name!r}: key {member_key!r} "
                f"already has field {field!r}"
            )
        fields.append((field, member.offset, member.size))
    if key is not None:
        samples.append(TarSampleEntry(key, tuple(fields)))
    return tuple(samples)


class WindowReader:
    """``read(offset, n)`` served from windows of ``window`` bytes fetched by ``fetch``."""

    def __init__(self, fetch: Callable[[int, int], bytes], size: int, window: int) -> None:
        self._fetch = fetch
        self._size = size
        self._window = window
        self._start = 0
        self._data = b""

    def __call__(self, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)``; fewer only at the end of the shard."""
        end = offset + length
        if not (self._start <= offset and end <= self._start + len(self._data)):
            stop = min(self._size, offset + max(length, self._window))
            self._start, self._data = offset, self._fetch(offset, stop)
        return self._data[offset - self._start : end - self._start]


class ReadAheadReader:
    """``read(offset, n)`` for a forward scan, served from chunks fetched ahead in parallel.

    The shard is cut into chunks of ``chunk`` bytes; while the scan reads chunk ``c``,
    chunks up to ``c + ahead`` are on their way in ``pool``, so a scan of a remote shard
    waits for about one request's latency, not one per chunk. Chunks behind the scan are
    dropped: at most ``ahead + 1`` chunks are held. Chunks that lie wholly inside a member's
    data and were not yet requested are never read (large members cost no bytes).
    """

    def __init__(
        self,
        fetch: Callable[[int, int], bytes],
        size: int,
        chunk: int,
        ahead: int,
        pool: Executor,
        *,
        keep: bool = False,
    ) -> None:
        self._keep = keep
        self._fetch = fetch
        self._size = size
        self._chunk = chunk
        self._ahead = ahead
        self._pool = pool
        self._chunks = -(-size // chunk)
        self._futures: dict[int, Future[bytes]] = {}
        self._scheduled = 0

    def _schedule(self, first: int, through: int) -> None:
        self._scheduled = max(self._scheduled, first)  # members larger than chunks: skipped
        while self._scheduled <= min(through, self._chunks - 1):
            start = self._scheduled * self._chunk
            end = min(self._size, start + self._chunk)
            self._futures[self._scheduled] = self._pool.submit(self._fetch, start, end)
            self._scheduled += 1

    def __call__(self, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)``; fewer only at the end of the shard."""
        end = min(self._size, offset + length)
        if end <= offset:
            return b""
        first, last = offset // self._chunk, (end - 1) // self._chunk
        self._schedule(first, last + self._ahead)
        if not self._keep:
            for stale in [c for c in self._futures if c < first]:
                del self._futures[stale]
        data = b"".join(self._futures[c].result() for c in range(first, last + 1))
        base = first * self._chunk
        return data[offset - base : end - base]

    def kept(self) -> dict[int, bytes]:
        """``{start: bytes}`` of every chunk read (``keep=True``), once the scan is done."""
        return {
            number * self._chunk: future.result()
            for number, future in self._futures.items()
            if future.done() and not future.cancelled() and future.exception() is None
        }

    def close(self) -> None:
        """Cancel the chunks not started and forget the rest."""
        for future in self._futures.values():
            future.cancel()
        self._futures.clear()


class StreamReader:
    """``read(offset, n)`` for a forward scan over one streamed GET of a whole shard.

    ``chunks`` yields the shard's bytes in order (one request); a scan that needs bytes
    beyond what has arrived takes the next chunks. If the stream fails part-way, the rest
    is read with ``fetch(start, end)`` (ranged reads with their own retries), so a dropped
    connection costs a few requests, never the index. With ``keep`` every chunk is held
    (``kept()``); otherwise chunks behind the scan are dropped.
    """

    def __init__(
        self,
        chunks: Iterator[bytes],
        size: int,
        fetch: Callable[[int, int], bytes],
        chunk: int,
        *,
        keep: bool = False,
    ) -> None:
        self._chunks: Iterator[bytes] | None = chunks
        self._size = size
        self._fetch = fetch
        self._chunk = chunk
        self._keep = keep
        self._held: list[tuple[int, bytes]] = []  # (start, bytes), contiguous, in order
        self._kept: dict[int, bytes] = {}
        self._arrived = 0

    def _take(self) -> None:
        data = b""
        if self._chunks is not None:
            try:
                data = bytes(next(self._chunks))
            except Exception:  # its end, or a dropped stream: the rest comes by ranged reads
                self._chunks = None
        if not data:
            if self._arrived >= self._size:
                raise EOFError
            data = self._fetch(self._arrived, min(self._size, self._arrived + self._chunk))
            if not data:
                raise EOFError
        data = data[: self._size - self._arrived]
        self._held.append((self._arrived, data))
        if self._keep:
            self._kept[self._arrived] = data
        self._arrived += len(data)

    def __call__(self, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)``; fewer only at the end of the shard."""
        end = min(self._size, offset + length)
        if end <= offset:
            return b""
        while self._arrived < end:
            try:
                self._take()
            except EOFError:
                break
        while self._held and self._held[0][0] + len(self._held[0][1]) <= offset:
            self._held.pop(0)  # behind the scan (still in ``kept`` with keep=True)
        parts = []
        for start, data in self._held:
            if start >= end:
                break
            parts.append(data[max(0, offset - start) : end - start])
        return b"".join(parts)

    def kept(self) -> dict[int, bytes]:
        """``{start: bytes}`` of every chunk read (``keep=True``), once the scan is done."""
        return dict(self._kept)

    def close(self) -> None:
        """Stop reading the stream and forget what is held (and kept)."""
        self._chunks = None
        self._held.clear()
        self._kept.clear()


def build_index(
    fetch: Callable[[int, int], bytes],
    size: int,
    tag: str,
    shard: str,
    window: int,
    *,
    pool: Executor | None = None,
    ahead: int = 0,
    kept: dict[int, bytes] | None = None,
) -> ShardIndex:
    """Index a shard of ``size`` bytes; ``fetch(start, end)`` returns its bytes ``[start, end)``.

    With a ``pool`` and ``ahead > 0`` the shard is read in chunks of ``window`` bytes,
    ``ahead`` of them fetched in parallel in front of the scan (``ReadAheadReader``); with
    ``kept`` (a dict) every chunk read is put there too, ``{start: bytes}``.
    """
    if pool is not None and ahead > 0:
        ahead_reader = ReadAheadReader(fetch, size, window, ahead, pool, keep=kept is not None)
        try:
            index = index_with(ahead_reader, size, tag, shard)
            if kept is not None:
                kept.update(ahead_reader.kept())
        finally:
            ahead_reader.close()
        return index
    return index_with(WindowReader(fetch, size, window), size, tag, shard)


def index_with(read: Callable[[int, int], bytes], size: int, tag: str, shard: str) -> ShardIndex:
    """The index of a shard of ``size`` bytes scanned through ``read(offset, n)``."""
    return ShardIndex(shard, size, tag, group_samples(iter_members(read, size, shard), shard))


def load_index(path: Path, shard: str, size: int, tag: str) -> ShardIndex | None:
    """The index saved at ``path`` if it describes this very shard version, else None."""
    try:
        index = ShardIndex.from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if (index.shard, index.size, index.tag) != (shard, size, tag):
        return None
    return index


def save_index(path: Path, index: ShardIndex) -> None:
    """Write the index atomically: a temporary file of its own, then a rename over ``path``.

    Each call writes a uniquely named temporary file in ``path``'s directory, so writers in
    several threads or processes never share one; the last rename wins and a reader sees
    either a whole index or none.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    unique = f"{os.getpid()}.{threading.get_ident()}.{next(_WRITES)}"
    temporary = path.with_name(f"{path.name}.{unique}.tmp")
    file = open(temporary, "x", encoding="utf-8")  # noqa: SIM115 ("x": never someone else's)
    try:
        with file:
            file.write(index.to_json())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def index_json_name(shard: str, identity: str) -> str:
    """File name of a shard's saved index: its base name plus a hash of its full identity."""
    base = shard.rstrip("/").rsplit("/", 1)[-1] or "shard"
    return f"{base}.{zlib.crc32(identity.encode('utf-8')):08x}.index.json"
