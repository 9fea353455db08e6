"""WebDataset-style tar shards, read one sample at a time with byte-range requests.

Each shard is indexed once (see ``_tar_index`` for the rules: formats, grouping by key,
rejected names). The index may be saved as JSON in ``index_dir`` (the shards' own directory
puts it beside them) and is reused while the shard's size and version tag are unchanged.
After that a sample costs one ranged read covering its members: a positional read for a
local file, a ranged GET for an object store. A batch (``get_samples``) reads each sample's
own bytes and coalesces only where a request costs more than the gap: ``coalesce_gap`` is
the cost of one request expressed in bytes (default 32 KiB), and two spans of one shard are
read with one request when the bytes between them are at most that (and the request stays
within ``max_request_bytes``); the requests run in parallel. So the tar headers between
neighbours are read, the bytes of a sample the batch does not want (an image: tens of KB)
are not, and an epoch reads about the dataset once. With ``cache=KnownFutureCache(...)``
batches go through the cache, which the loader tells its plan (``plan_reads``) and which
reads by it: whole runs of shards ahead of need, in two tiers (memory and disk) evicted by
next use (``docs/object-storage.md``).

A sample is a dict: ``{"__key__": key, field: bytes, ...}``, passed through ``decode``.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypedDict, TypeVar, overload

import anyio
import anyio.abc

from .._compat import add_note
from .._errors import MalformedShardError, ObjectNotFoundError, SourceError
from ..core import at_least
from ._concurrency import PerLoop, gather_ordered
from ._decode import decode_named, naming_sample
from ._local import check_index
from ._object_store import ObjectReader, ObjectStoreStatistics, RetryPolicy
from ._tar_index import (
    ShardIndex,
    StreamReader,
    TarSampleEntry,
    build_index,
    index_json_name,
    index_with,
    load_index,
    save_index,
)
from ._tar_keep import KeepBudget, KeptShard, sample_bytes
from .cache import ByteRange, KnownFutureCache, check_coalescing, coalesce

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ("TarSample", "TarShards", "decode_tar_sample")

SampleT = TypeVar("SampleT")
TarSample = dict[str, Any]
"""``{"__key__": str, field: bytes, ...}``."""

LOCAL_WINDOW = 64 * 1024
REMOTE_CHUNK = 4 << 20
"""Bytes per ranged GET while indexing a shard in an object store."""
REMOTE_AHEAD = 4
"""Chunks of one shard fetched in parallel ahead of the header scan."""
COALESCE_GAP = 32 << 10
"""What one request costs, in bytes: a batch's gaps up to this are read, not requested around."""


class TarShardsOptions(TypedDict, total=False):
    """The keyword options of ``TarShards`` besides ``decode`` (documented there)."""

    index_dir: str | os.PathLike[str] | None
    max_concurrency: int
    timeout: float | None
    retries: RetryPolicy | None
    index_threads: int
    coalesce_gap: int
    max_request_bytes: int
    cache: KnownFutureCache | None


def decode_tar_sample(sample: TarSample, index: int) -> TarSample:
    """The sample dict unchanged (the default decoder)."""
    return sample


def _pread_exact(path: str, start: int, end: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise ObjectNotFoundError(f"shard not found: {path!r}") from None
    except OSError as exc:
        raise SourceError(f"cannot open shard {path!r}: {exc.strerror or exc}") from None
    try:
        chunks = []
        offset = start
        while offset < end:
            chunk = os.pread(fd, end - offset, offset)
            if not chunk:
                raise MalformedShardError(
                    f"shard {path!r} is shorter than its index says: bytes [{start}, {end}) "
                    f"were expected but it ends at byte {offset}; delete its saved index"
                )
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _folder_of(keys: Sequence[str]) -> str | None:
    """The deepest folder holding every key (None: the store's root)."""
    common = keys[0].split("/")[:-1] if keys else []
    for key in keys[1:]:
        parts = key.split("/")[:-1]
        same = 0
        while same < min(len(common), len(parts)) and common[same] == parts[same]:
            same += 1
        del common[same:]
    return "/".join(common) or None


def _shard_names(shards: Any, store: Any) -> list[str]:
    """The shards as names: a non-empty sequence of paths, or of keys when ``store`` is given."""
    if isinstance(shards, (str, os.PathLike)):
        raise TypeError(
            "shards must be a sequence of paths or keys but got a single one "
            f"({shards!r}); pass a list: [{shards!r}]"
        )
    names = []
    for position, shard in enumerate(shards):
        if not isinstance(shard, (str, os.PathLike)) or not str(shard):
            raise TypeError(f"shards[{position}] must be a non-empty str or path but got {shard!r}")
        if store is not None and not isinstance(shard, str):
            raise TypeError(f"shards[{position}] must be an object key (str) but got {shard!r}")
        names.append(str(shard))
    if not names:
        raise ValueError("shards must name at least one shard but got none")
    return names


class TarShards(Generic[SampleT]):
    """Samples from WebDataset tar shards on a local disk or in an obstore store.

    Indices are built (or loaded) here, blocking, ``index_threads`` shards at a time. A
    shard in an object store is streamed whole with one GET when a ``cache`` will take its
    samples (indexed as it streams by); otherwise it is read in chunks of 4 MiB, four of
    them in flight ahead of the header scan. What indexing keeps for the cache stays within
    the cache's ``max_bytes`` (plus a shard per indexing thread), however many shards there
    are: shards are kept while they fit, and offered in order as they are indexed.

    Args:
        shards: Local paths (``store`` is None) or object keys, in order; sample indices
            run through the shards in this order, each shard's samples in tar order.
        store: An obstore store holding the shards, or None for local files.
        index_dir: A local directory where indices are saved and loaded as JSON; None keeps
            them in memory only.
        decode: ``decode(sample, index) -> result``; the default returns the dict.
        max_concurrency: Most reads in flight (object stores and local threads alike).
        timeout: Seconds per request to the store.
        retries: Retry policy of the store's requests.
        index_threads: Shards indexed at the same time.
        coalesce_gap: The cost of one request, in bytes: two of a batch's spans of one
            shard at most this many bytes apart are read with one request (the bytes
            between them are read and dropped), farther ones with a request each, in
            parallel. 0 reads each sample alone, ranges that touch aside.
        max_request_bytes: Largest coalesced read.
        cache: A ``KnownFutureCache`` that batches are read through; the loader tells it
            the plan when a stream starts.
    """

    @overload
    def __init__(
        self: TarShards[TarSample],
        shards: Sequence[str | os.PathLike[str]],
        store: Any = None,
        **options: Unpack[TarShardsOptions],
    ) -> None: ...

    @overload
    def __init__(
        self,
        shards: Sequence[str | os.PathLike[str]],
        store: Any = None,
        *,
        decode: Callable[[TarSample, int], SampleT],
        **options: Unpack[TarShardsOptions],
    ) -> None: ...

    def __init__(
        self,
        shards: Sequence[str | os.PathLike[str]],
        store: Any = None,
        *,
        index_dir: str | os.PathLike[str] | None = None,
        decode: Callable[[TarSample, int], Any] = decode_tar_sample,
        max_concurrency: int = 64,
        timeout: float | None = 30.0,
        retries: RetryPolicy | None = None,
        index_threads: int = 8,
        coalesce_gap: int = COALESCE_GAP,
        max_request_bytes: int = 64 << 20,
        cache: KnownFutureCache | None = None,
    ) -> None:
        names = _shard_names(shards, store)
        if not callable(decode):
            raise TypeError(f"decode must be callable but got {type(decode).__name__}")
        max_concurrency = at_least("max_concurrency", max_concurrency, 1)
        index_path = _check_index_dir(index_dir)
        index_threads = at_least("index_threads", index_threads, 1)
        self.coalesce_gap, self.max_request_bytes = check_coalescing(
            coalesce_gap, max_request_bytes
        )
        if cache is not None and not isinstance(cache, KnownFutureCache):
            raise TypeError(f"cache must be a KnownFutureCache but got {type(cache).__name__}")
        self.shards: tuple[str, ...] = tuple(names)
        self.decode = decode
        self.store = store
        self.reader = (
            None
            if store is None
            else ObjectReader(
                store, max_concurrency=max_concurrency, timeout=timeout, retries=retries
            )
        )
        self._threads = PerLoop(lambda: anyio.CapacityLimiter(max_concurrency))
        self.index_dir = index_path
        self._listed = self._listed_versions(names)
        self._shard_numbers = {name: number for number, name in enumerate(names)}
        self._span_bounds: dict[int, tuple[list[int], list[int]]] = {}
        self.cache = cache
        self._index_and_bind(names, index_threads)

    def _listed_versions(self, names: list[str]) -> dict[str, tuple[int, str]]:
        """Each shard's size and version tag from a listing of their folder, which saved
        indices of a store's shards are checked against (empty: local shards, no
        ``index_dir``)."""
        if self.reader is None or self.index_dir is None:
            return {}
        # One listing request per 1,000 shards instead of a HEAD per shard (unless the
        # folder holds far more than the shards: then HEADs).
        return self.reader.versions_under(_folder_of(names), 4 * len(names)) or {}

    def _index_and_bind(self, names: list[str], threads: int) -> None:
        """Index every shard (``_index_all``), then bind the cache to this source; on an
        error the samples kept for the cache are withdrawn."""
        cache = self.cache
        budget = None if cache is None else KeepBudget(cache)
        try:
            self.indices, self._starts = self._index_all(names, threads, budget)
            if cache is not None:
                cache.bind(self)
        except BaseException:
            if budget is not None:
                budget.withdraw()  # samples offered for indices that do not exist
            raise

    def _index_all(
        self, names: list[str], threads: int, budget: KeepBudget | None
    ) -> tuple[tuple[ShardIndex, ...], list[int]]:
        """Every shard's index and the first sample number of each shard (and the total).

        In shard order, each kept shard is offered to the cache as soon as its first
        sample's number is known: what indexing holds stays within the cache's bound.
        """
        shard_threads = min(threads, len(names))
        indices: list[ShardIndex] = []
        starts = [0]
        try:
            with (
                ThreadPoolExecutor(shard_threads) as pool,
                ThreadPoolExecutor(shard_threads * max(1, REMOTE_AHEAD)) as chunk_pool,
            ):
                self._chunk_pool = chunk_pool
                self._budget = budget
                for index, kept in pool.map(self._index, names):
                    if kept is not None and budget is not None:
                        budget.offer(starts[-1], kept)
                    indices.append(index)
                    starts.append(starts[-1] + len(index.samples))
        finally:  # every indexing thread has ended
            del self._chunk_pool, self._budget
        return tuple(indices), starts

    def _index(self, shard: str) -> tuple[ShardIndex, KeptShard | None]:
        if self.reader is None:
            return self._index_local(shard), None
        reader = self.reader
        identity = f"{reader.store!r}/{shard}"
        saved = None
        if self.index_dir is not None:
            size, tag = self._listed.get(shard) or reader.head_sync(shard)
            saved = self.index_dir / index_json_name(shard, identity)
            loaded = load_index(saved, shard, size, tag)
            if loaded is not None:
                return loaded, None

        def fetch(start: int, end: int) -> bytes:
            return reader.read_sync(shard, start, end)

        budget = self._budget
        kept: KeptShard | None = None
        if budget is not None:
            # The cache will want these bytes: one GET of the whole shard, indexed as it
            # streams by; kept (cut into samples, for the cache) while the budget has room.
            size, tag, chunks = reader.stream_sync(shard, REMOTE_CHUNK)
            keep = budget.reserve(size)
            stream = StreamReader(chunks, size, fetch, REMOTE_CHUNK, keep=keep)
            try:
                index = index_with(stream, size, tag, shard)
                if keep:
                    pieces = sample_bytes(index.samples, stream.kept())
                    stream.close()  # the chunks go; their samples stay
                    kept = KeptShard(pieces, sum(len(p) for p in pieces if p is not None))
                    budget.release(size - kept.size)
            except BaseException:
                if keep and kept is None:
                    budget.release(size)
                raise
            finally:
                stream.close()
        else:  # chunks fetched ahead, in parallel: about one latency per shard, not per MiB
            if saved is None:
                size, tag = reader.head_sync(shard)
            index = build_index(
                fetch, size, tag, shard, REMOTE_CHUNK, pool=self._chunk_pool, ahead=REMOTE_AHEAD
            )
        if saved is not None:
            save_index(saved, index)
        return index, kept

    def _index_local(self, shard: str) -> ShardIndex:
        try:
            stat = os.stat(shard)
        except FileNotFoundError:
            raise ObjectNotFoundError(f"shard not found: {shard!r}") from None
        size, tag = stat.st_size, f"mtime_ns={stat.st_mtime_ns}"
        saved = None
        if self.index_dir is not None:
            saved = self.index_dir / index_json_name(shard, os.path.abspath(shard))
            loaded = load_index(saved, shard, size, tag)
            if loaded is not None:
                return loaded

        def fetch(start: int, end: int) -> bytes:
            return _pread_exact(shard, start, end)

        index = build_index(fetch, size, tag, shard, LOCAL_WINDOW)
        if saved is not None:
            save_index(saved, index)
        return index

    def __len__(self) -> int:
        return self._starts[-1]

    def __repr__(self) -> str:
        where = "local" if self.store is None else repr(self.store)
        return f"TarShards({len(self.shards)} shards, {len(self)} samples, {where})"

    def statistics(self) -> ObjectStoreStatistics | None:
        """The object store's request counters, or None for local shards."""
        return None if self.reader is None else self.reader.statistics()

    def locate(self, index: int) -> tuple[str, TarSampleEntry]:
        """(shard, index entry) of sample ``index``."""
        position = check_index(index, len(self))
        shard = bisect.bisect_right(self._starts, position) - 1
        return self.shards[shard], self.indices[shard].samples[position - self._starts[shard]]

    def versions(self) -> tuple[tuple[str, str], ...]:
        """``(shard, version tag)`` of every shard as indexed (ETag, or mtime for files)."""
        return tuple(
            (name, index.tag) for name, index in zip(self.shards, self.indices, strict=True)
        )

    def plan_reads(
        self, sampler: Any, seed: int, start_step: int = 0, stop_step: int | None = None
    ) -> None:
        """Tell the cache (if any) the plan: ``cache.plan(sampler, seed, start_step, stop_step)``.

        The loader calls it, in a worker thread, when a stream starts from ``start_step``
        (and stops before ``stop_step``, None: never); users need not. Without a cache it
        does nothing. It blocks while the plan's first window is computed. Each stream
        keeps its own plan (its sampler and seed), so a training and an evaluation loader
        over this source share one cache; ``cache.plan`` names a stream otherwise.
        """
        if self.cache is not None:
            self.cache.plan(sampler, seed, start_step, stop_step)

    async def serve_reads(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Fetch the cache's read-ahead behind the steps until cancelled (see
        ``KnownFutureCache.serve``); without a cache it returns at once.

        The loader runs it beside each stream's steps; users need not.
        """
        if self.cache is None:
            task_status.started()
            return
        await self.cache.serve(task_status=task_status)

    def span_of(self, index: int) -> ByteRange:
        """``(shard, start, end)``: the bytes holding sample ``index``'s members."""
        shard, entry = self.locate(index)
        start, end = entry.span
        return shard, start, end

    def indices_within(self, key: str, start: int, end: int) -> range:
        """The samples of shard ``key`` whose spans lie inside bytes ``[start, end)``."""
        number = self._shard_numbers[key]
        bounds = self._span_bounds.get(number)
        if bounds is None:
            spans = [entry.span for entry in self.indices[number].samples]
            bounds = self._span_bounds[number] = ([a for a, _ in spans], [b for _, b in spans])
        first = bisect.bisect_left(bounds[0], start)
        stop = bisect.bisect_right(bounds[1], end)
        base = self._starts[number]
        return range(base + first, base + max(first, stop))

    async def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of shard ``key``: one positional read or ranged GET."""
        if start == end:
            return b""
        if self.reader is None:
            return await anyio.to_thread.run_sync(
                _pread_exact, key, start, end, limiter=self._threads.get()
            )
        data = await self.reader.read(key, start, end)
        if len(data) != end - start:
            raise MalformedShardError(
                f"shard {key!r} returned {len(data)} bytes for [{start}, {end}): "
                "it changed since it was indexed"
            )
        return data

    def _assemble(self, index: int, data: bytes) -> TarSample:
        _, entry = self.locate(index)
        start = entry.span[0]
        sample: TarSample = {"__key__": entry.key}
        for field, offset, size in entry.fields:
            sample[field] = data[offset - start : offset - start + size]
        return sample

    async def read_sample(self, index: int) -> TarSample:
        """The undecoded sample dict at ``index``: one ranged read of its members."""
        if self.cache is not None:
            (data,) = await self.cache.read([index])
        else:
            data = await self.read_range(*self.span_of(index))
        return self._assemble(index, data)

    def plan_ranges(self, spans: Iterable[ByteRange]) -> list[ByteRange]:
        """The requests that read ``spans`` (a batch's, without a cache): the coalescing rule.

        Two spans of one shard merge when the gap between them is at most ``coalesce_gap``
        bytes (reading the gap costs less than a request) and the merged range stays within
        ``max_request_bytes``; the rest are a request each. Ordered by shard (in order of
        first appearance), then by start.
        """
        return coalesce(spans, self.coalesce_gap, self.max_request_bytes)

    async def read_samples(self, indices: Sequence[int]) -> list[TarSample]:
        """The undecoded sample dicts of one batch, read with coalesced ranges."""
        if self.cache is not None:
            datas = await self.cache.read(indices)
            return [self._assemble(i, d) for i, d in zip(indices, datas, strict=True)]
        spans = {int(index): self.span_of(index) for index in indices}
        ranges = self.plan_ranges(spans.values())

        async def read_one(byte_range: ByteRange) -> bytes:
            try:
                return await self.read_range(*byte_range)
            except Exception as error:
                carried = [i for i, span in spans.items() if _inside(span, byte_range)]
                add_note(error, f"aioloader: the read carried dataset indices {carried}")
                raise

        chunks = await gather_ordered(read_one, ranges)
        carriers = RangeFinder(ranges)
        samples = []
        for index in indices:
            key, start, end = spans[int(index)]
            carrier = carriers.find(key, start)
            chunk_start = ranges[carrier][1]
            data = chunks[carrier][start - chunk_start : end - chunk_start]
            samples.append(self._assemble(int(index), data))
        return samples

    def _decode(self, index: int, sample: TarSample) -> SampleT:
        name = f"sample {sample['__key__']!r} of shard {self.locate(index)[0]!r}"
        result: SampleT = decode_named(self.decode, sample, index, name)
        return result

    async def get_sample(self, index: int) -> SampleT:
        """Read sample ``index`` and pass it through ``decode``."""
        shard, _ = self.locate(index)  # a bad index raises here, before any read
        position = int(index)
        with naming_sample(position, lambda: f"sample {position} of shard {shard!r}"):
            sample = await self.read_sample(position)
        return self._decode(position, sample)

    async def get_samples(self, indices: Sequence[int]) -> list[SampleT]:
        """Read one batch (coalesced, or through the cache); results in the order of ``indices``."""
        samples = await self.read_samples(indices)
        return [self._decode(int(i), sample) for i, sample in zip(indices, samples, strict=True)]


def _check_index_dir(index_dir: Any) -> Path | None:
    """``index_dir`` as a Path: None, or a directory that exists or can be made."""
    if index_dir is None:
        return None
    if not isinstance(index_dir, (str, os.PathLike)) or not str(index_dir):
        raise TypeError(
            f"index_dir must be a directory path (str or os.PathLike) or None but got "
            f"{type(index_dir).__name__} ({index_dir!r})"
        )
    path = Path(index_dir)
    for part in (path, *path.parents):
        if part.exists() and not part.is_dir():
            raise ValueError(
                f"index_dir must be a directory but got {str(path)!r}: {str(part)!r} is a file"
            )
        if part.exists():
            break
    return path


class RangeFinder:
    """Which of a batch's coalesced ranges holds a span: a binary search per span.

    ``coalesce`` orders the ranges by object, then by start, and ranges of one object never
    overlap; so the range holding a span is the last of its object starting at or before it.
    Matching a batch of ``n`` samples costs ``O(n log n)``, not a scan of every range.
    """

    def __init__(self, ranges: Sequence[ByteRange]) -> None:
        self._starts: dict[str, list[int]] = {}
        self._first: dict[str, int] = {}
        for position, (key, start, _) in enumerate(ranges):
            if key not in self._starts:
                self._starts[key], self._first[key] = [], position
            self._starts[key].append(start)

    def find(self, key: str, start: int) -> int:
        """The position (in ``ranges``) of the range holding a span of ``key`` from ``start``."""
        found = bisect.bisect_right(self._starts[key], start) - 1
        assert found >= 0, (key, start)
        return self._first[key] + found


def _inside(span: ByteRange, byte_range: ByteRange) -> bool:
    return span[0] == byte_range[0] and byte_range[1] <= span[1] and span[2] <= byte_range[2]
