"""Samples stored one per object in an object store (S3, GCS, Azure, local, memory) via obstore.

Reads are bounded (``max_concurrency`` requests in flight per source), each attempt has a
timeout, and transient failures (timeouts, dropped connections, HTTP 408, 429 and 5xx) are
retried with exponential backoff and jitter. The jitter is drawn from ``derive(seed, 0,
crc32(key), attempt, 201)``, so it is reproducible and only ever changes timing, never data.
Permanent failures (not found, access denied, other 4xx) are raised at once, naming the key
and never a credential. A body cut short (fewer bytes than its ``Content-Length``, then the
connection closed) is never returned as data: obstore reports it and it is retried.

By default a sample that cannot be read fails its batch (``on_error="raise"``). Users who
prefer to train on can opt in to ``on_error="skip"`` with a ``fallback(index) -> sample``;
that trades the determinism contract away (see ``ObjectStore``).

obstore retries inside its client too (10 times by default). To make ``RetryPolicy`` the
only policy in force, build the store with ``retry_config={"max_retries": 0}``.

A whole object is read as the byte range ``[0, 2^62)``, which stores answer with the whole
object in one call into obstore (cheaper than a GET and a body read); an empty object, which
no range covers, falls back to a plain GET.

On asyncio (and uvloop) obstore's native async API is used. Under trio, where it cannot run,
the blocking API runs in worker threads limited to ``max_concurrency``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, overload

import anyio
import obstore

from .._compat import add_note
from .._errors import ObjectNotFoundError, SourceError
from .._event_loops import running_asyncio_loop
from ..core import instance_not_bool, positive
from ._concurrency import PerLoop, SharedLimit, gather_ordered
from ._decode import decode_bytes, decode_named, decoder_takes_key, naming_sample
from ._local import check_index
from ._retry import (
    RequestCounters,
    RetryPolicy,
    describe_failure,
    is_range_error,
    scrub,
    secrets_of,
)

logger = logging.getLogger("aioloader")

__all__ = ("ObjectReader", "ObjectStore", "ObjectStoreStatistics", "RetryPolicy")

SampleT = TypeVar("SampleT")
ResultT = TypeVar("ResultT")

_WHOLE = 1 << 62  # the end of an open byte range: "from 0 to the end of the object"
MAX_SKIPPED_KEYS = 100
"""How many skipped keys ``ObjectStoreStatistics.skipped_keys`` keeps (the first ones)."""

OnError = Literal["raise", "skip"]


@dataclass(frozen=True)
class ObjectStoreStatistics(RequestCounters):
    """Counters of an ``ObjectReader`` or ``ObjectStore``.

    ``requests`` and ``retries`` (``RequestCounters``) come first, then these.

    Attributes:
        bytes_read: Bytes delivered.
        in_flight: Requests in flight now.
        failures: Reads that failed for good (raised, or skipped).
        skipped: Samples replaced by the fallback (``on_error="skip"`` only).
        skipped_keys: The first ``MAX_SKIPPED_KEYS`` keys skipped, in the order they were.
    """

    bytes_read: int
    in_flight: int
    failures: int
    skipped: int = 0
    skipped_keys: tuple[str, ...] = ()


class ObjectReader:
    """Reads objects or byte ranges from one obstore store: bounded, timed, retried.

    Args:
        store: Any obstore store (``S3Store``, ``GCSStore``, ``AzureStore``, ``LocalStore``,
            ``MemoryStore``...).
        max_concurrency: Most requests in flight at once.
        timeout: Seconds allowed for one attempt (None: no limit of ours).
        retries: The retry policy for transient failures.
    """

    def __init__(
        self,
        store: Any,
        *,
        max_concurrency: int = 64,
        timeout: float | None = 30.0,
        retries: RetryPolicy | None = None,
    ) -> None:
        max_concurrency = positive("max_concurrency", max_concurrency)
        if timeout is not None:
            rule = "a number > 0 or None"
            if not instance_not_bool("timeout", timeout, (int, float), rule) > 0:
                raise ValueError(f"timeout must be {rule} but got {timeout!r}")
        if retries is not None and not isinstance(retries, RetryPolicy):
            raise TypeError(f"retries must be a RetryPolicy but got {type(retries).__name__}")
        self.store = store
        self.max_concurrency = max_concurrency
        self.timeout = timeout
        self.retries = retries or RetryPolicy()
        self._limiter = SharedLimit(max_concurrency)  # across every thread and loop
        self._threads = PerLoop(lambda: anyio.CapacityLimiter(max_concurrency))
        self._requests = self._retries = self._bytes = self._in_flight = self._failures = 0
        self._secrets = secrets_of(store)
        self._sync_lock = threading.Lock()  # read_sync may run on several threads at once

    def __repr__(self) -> str:
        return f"ObjectReader({self.store!r}, max_concurrency={self.max_concurrency})"

    def statistics(self) -> ObjectStoreStatistics:
        """A snapshot of the counters."""
        return ObjectStoreStatistics(
            self._requests, self._retries, self._bytes, self._in_flight, self._failures
        )

    def _scrub(self, text: str) -> str:
        return scrub(text, self._secrets)

    def _fetch_sync(self, key: str, start: int | None, end: int | None) -> bytes:
        if start is not None:
            return bytes(obstore.get_range(self.store, key, start=start, end=end))
        try:
            return bytes(obstore.get_range(self.store, key, start=0, end=_WHOLE))
        except Exception as exc:
            if not is_range_error(exc):
                raise
        return bytes(obstore.get(self.store, key).bytes())

    async def _fetch(self, key: str, start: int | None, end: int | None) -> bytes:
        if running_asyncio_loop() is None:  # trio: obstore's async API needs asyncio
            return await anyio.to_thread.run_sync(
                self._fetch_sync,
                key,
                start,
                end,
                abandon_on_cancel=True,
                limiter=self._threads.get(),
            )
        if start is not None:
            return bytes(await obstore.get_range_async(self.store, key, start=start, end=end))
        try:  # one call into obstore instead of get_async + bytes_async: less CPU per read
            return bytes(await obstore.get_range_async(self.store, key, start=0, end=_WHOLE))
        except Exception as exc:
            if not is_range_error(exc):
                raise
        # No range covers an empty object; a store may refuse open ranges: plain GET.
        result = await obstore.get_async(self.store, key)
        return bytes(await result.bytes_async())

    def _error(
        self, key: str, start: int | None, end: int | None, kind: str, summary: str, attempts: int
    ) -> SourceError:
        self._failures += 1
        target = f"object {key!r}" if start is None else f"bytes [{start}, {end}) of object {key!r}"
        where = f"{target} in {self.store!r}"
        summary = self._scrub(summary)
        if kind == "not_found":
            return ObjectNotFoundError(f"{where} not found ({summary})")
        if kind == "denied":
            return SourceError(
                f"access to {where} was denied ({summary}): check the store's credentials "
                "and permissions"
            )
        if kind == "transient":
            return SourceError(
                f"reading {where} failed after {attempts} attempts "
                f"(retries.max_attempts={self.retries.max_attempts}); last error: {summary}"
            )
        return SourceError(f"reading {where} failed: {summary}")

    async def read(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes of ``key`` (or of ``[start, end)``), retrying transient failures.

        Raises:
            ObjectNotFoundError: The key does not exist.
            SourceError: Access was denied, or a permanent failure, or retries ran out.
        """
        attempt = 0
        while True:
            attempt += 1
            async with self._limiter:
                self._requests += 1
                self._in_flight += 1
                try:
                    if self.timeout is None:
                        data = await self._fetch(key, start, end)
                    else:
                        with anyio.fail_after(self.timeout):
                            data = await self._fetch(key, start, end)
                except Exception as exc:
                    kind, summary = describe_failure(exc)
                else:
                    self._bytes += len(data)
                    return data
                finally:
                    self._in_flight -= 1
            if kind == "transient" and attempt < self.retries.max_attempts:
                self._retries += 1
                delay = self.retries.backoff(key, attempt)
                logger.info(
                    "aioloader: retrying %r after attempt %d (%s) in %.3f s",
                    key,
                    attempt,
                    summary,
                    delay,
                )
                await anyio.sleep(delay)
                continue
            raise self._error(key, start, end, kind, summary, attempt) from None

    def read_sync(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Blocking ``read`` for setup code (indexing), callable from any thread.

        obstore's own client timeout applies here, not ``timeout``.
        """
        data = self._retried_sync(key, start, end, lambda: self._fetch_sync(key, start, end))
        with self._sync_lock:
            self._bytes += len(data)
        return data

    def _retried_sync(
        self, key: str, start: int | None, end: int | None, request: Callable[[], ResultT]
    ) -> ResultT:
        """``request()``, counted, and retried under ``retries`` while it fails transiently;
        a failure for good raises the error naming ``key`` (and the range, if any)."""
        attempt = 0
        while True:
            attempt += 1
            with self._sync_lock:
                self._requests += 1
            try:
                return request()
            except Exception as exc:
                kind, summary = describe_failure(exc)
            if kind == "transient" and attempt < self.retries.max_attempts:
                with self._sync_lock:
                    self._retries += 1
                time.sleep(self.retries.backoff(key, attempt))
                continue
            with self._sync_lock:
                error = self._error(key, start, end, kind, summary, attempt)
            raise error from None

    def stream_sync(self, key: str, chunk: int) -> tuple[int, str, Iterator[bytes]]:
        """One GET of the whole of ``key``, blocking: (size, version tag, its chunks in order).

        Opening the request is retried like ``read_sync``; the chunks (about ``chunk`` bytes
        each) arrive as they are iterated and are counted as they come.
        """
        result = self._retried_sync(key, None, None, lambda: obstore.get(self.store, key))
        size, tag = _size_and_tag(result.meta)
        return size, tag, self._counted(result.stream(min_chunk_size=chunk))

    def _counted(self, chunks: Iterable[Any]) -> Iterator[bytes]:
        for piece in chunks:
            data = bytes(piece)
            with self._sync_lock:
                self._bytes += len(data)
            yield data

    def head_sync(self, key: str) -> tuple[int, str]:
        """(size, version tag) of ``key``, blocking; the tag is the ETag or the mtime."""
        try:
            meta = obstore.head(self.store, key)
        except Exception as exc:
            kind, summary = describe_failure(exc)
            raise self._error(key, None, None, kind, summary, 1) from None
        return _size_and_tag(meta)

    def list_sync(self, prefix: str | None) -> list[str]:
        """Sorted keys under ``prefix`` (all keys when None), blocking."""
        try:
            keys = [
                meta["path"] for chunk in obstore.list(self.store, prefix=prefix) for meta in chunk
            ]
        except Exception as exc:
            _, summary = describe_failure(exc)
            raise SourceError(
                f"listing prefix {prefix!r} in {self.store!r} failed: {self._scrub(summary)}"
            ) from None
        return sorted(keys)

    def versions_under(self, prefix: str | None, most: int) -> dict[str, tuple[int, str]] | None:
        """``{key: (size, version tag)}`` of every object under ``prefix``, from listing
        requests (up to 1,000 objects each), or None if there are more than ``most``.

        Checking many objects this way costs a request per 1,000 instead of a HEAD each
        (neither is counted in ``statistics``: they fetch no sample bytes).
        """
        found: dict[str, tuple[int, str]] = {}
        try:
            for chunk in obstore.list(self.store, prefix=prefix):
                for meta in chunk:
                    found[str(meta["path"])] = _size_and_tag(meta)
                if len(found) > most:
                    return None
        except Exception as exc:
            _, summary = describe_failure(exc)
            raise SourceError(
                f"listing prefix {prefix!r} in {self.store!r} failed: {self._scrub(summary)}"
            ) from None
        return found


def _size_and_tag(meta: Any) -> tuple[int, str]:
    """(size, version tag) of an object's metadata; the tag is the ETag or the mtime."""
    tag = meta.get("e_tag") or str(meta.get("last_modified", ""))
    return int(meta["size"]), str(tag)


def _check_range(byte_range: Any) -> tuple[int, int] | None:
    if byte_range is None:
        return None
    ok = isinstance(byte_range, (tuple, list)) and len(byte_range) == 2
    if ok:
        start, end = byte_range
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end))
        ok = ok and 0 <= start < end
    if not ok:
        raise ValueError(
            f"byte_range must be (start, end) with 0 <= start < end but got {byte_range!r}"
        )
    return int(byte_range[0]), int(byte_range[1])


class ObjectStore(Generic[SampleT]):
    """One sample per object of an obstore store.

    A read that fails for good (not found, access denied, retries exhausted) raises
    ``SourceError`` naming the key, by default. With ``on_error="skip"`` such a sample is
    replaced by ``fallback(index)`` instead, and counted in ``statistics()`` (``skipped``,
    ``skipped_keys``). This is opt-in because it breaks the determinism contract: the batch
    at a step then depends on which reads failed, that is on timing and faults, and a
    resumed or repeated run may see different data. Only read failures are skipped; a
    decode error, or a cancellation, still raises.

    Args:
        store: Any obstore store.
        keys: The object keys, in sample order.
        prefix: List the keys under this prefix instead (sorted; blocking, once, here).
            With neither ``keys`` nor ``prefix`` the whole store is listed.
        decode: ``decode(data, index) -> sample``, or one marked ``@takes_key`` called as
            ``decode(data, index, key)`` to also get the object's key (default: the bytes).
        max_concurrency: Most requests in flight at once (all batches together).
        timeout: Seconds allowed for one attempt.
        retries: Retry policy for transient failures (default ``RetryPolicy()``).
        byte_range: ``(start, end)``: read only these bytes of every object.
        on_error: ``"raise"`` (default) or ``"skip"``: what a read that fails for good does.
        fallback: ``fallback(index) -> sample``, the sample that replaces a skipped one
            (required with ``on_error="skip"``; it is not decoded).
    """

    @overload
    def __init__(
        self: ObjectStore[bytes],
        store: Any,
        keys: Sequence[str] | None = None,
        prefix: str | None = None,
        *,
        max_concurrency: int = 64,
        timeout: float | None = 30.0,
        retries: RetryPolicy | None = None,
        byte_range: tuple[int, int] | None = None,
        on_error: OnError = "raise",
        fallback: Callable[[int], bytes] | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        store: Any,
        keys: Sequence[str] | None = None,
        prefix: str | None = None,
        *,
        decode: Callable[[bytes, int], SampleT] | Callable[[bytes, int, str], SampleT],
        max_concurrency: int = 64,
        timeout: float | None = 30.0,
        retries: RetryPolicy | None = None,
        byte_range: tuple[int, int] | None = None,
        on_error: OnError = "raise",
        fallback: Callable[[int], SampleT] | None = None,
    ) -> None: ...

    def __init__(
        self,
        store: Any,
        keys: Sequence[str] | None = None,
        prefix: str | None = None,
        *,
        decode: Callable[..., Any] = decode_bytes,
        max_concurrency: int = 64,
        timeout: float | None = 30.0,
        retries: RetryPolicy | None = None,
        byte_range: tuple[int, int] | None = None,
        on_error: OnError = "raise",
        fallback: Callable[[int], Any] | None = None,
    ) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip' but got {on_error!r}")
        if fallback is not None and not callable(fallback):
            raise TypeError(f"fallback must be callable but got {type(fallback).__name__}")
        if on_error == "skip" and fallback is None:
            raise ValueError(
                "on_error='skip' needs fallback(index) -> sample, the sample that replaces "
                "one that cannot be read, but got fallback=None"
            )
        if on_error == "raise" and fallback is not None:
            raise ValueError("fallback is only used with on_error='skip' but on_error='raise'")
        self.on_error: OnError = on_error
        self.fallback = fallback
        self._skipped = 0
        self._skipped_keys: list[str] = []
        if not callable(decode):
            raise TypeError(f"decode must be callable but got {type(decode).__name__}")
        self.reader = ObjectReader(
            store, max_concurrency=max_concurrency, timeout=timeout, retries=retries
        )
        self.byte_range = _check_range(byte_range)
        self.decode = decode
        self._decode_takes_key = decoder_takes_key(decode)
        if keys is not None and prefix is not None:
            raise ValueError("give keys or prefix, not both")
        if keys is not None:
            if isinstance(keys, str):
                raise TypeError("keys must be a sequence of str but got one str")
            for position, key in enumerate(keys):
                if not isinstance(key, str) or not key:
                    raise TypeError(f"keys[{position}] must be a non-empty str but got {key!r}")
            self.keys: tuple[str, ...] = tuple(keys)
        else:
            self.keys = tuple(self.reader.list_sync(prefix))
            if not self.keys:
                raise ValueError(f"prefix {prefix!r} matched no object in {store!r}")

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        return f"ObjectStore({self.reader.store!r}, {len(self.keys)} keys)"

    def statistics(self) -> ObjectStoreStatistics:
        """Request and skip counters (see ``ObjectStoreStatistics``)."""
        return dataclasses.replace(
            self.reader.statistics(),
            skipped=self._skipped,
            skipped_keys=tuple(self._skipped_keys),
        )

    async def read_bytes(self, index: int) -> bytes:
        """The raw bytes of sample ``index`` (its byte range if one is set)."""
        key = self.keys[check_index(index, len(self.keys))]
        if self.byte_range is None:
            return await self.reader.read(key)
        return await self.reader.read(key, *self.byte_range)

    async def get_sample(self, index: int) -> SampleT:
        """Fetch and decode the object at ``index`` (or its fallback, see ``on_error``).

        Raises:
            IndexError: ``index`` is not in ``[0, len(self))`` (negative ones included, as
                for every source).
        """
        position = check_index(index, len(self.keys))  # before any read, with no context
        key = self.keys[position]
        try:
            with naming_sample(position, lambda: f"object {key!r}"):
                data = await self.read_bytes(position)
        except SourceError:
            if self.fallback is None:  # on_error == "raise": never skip silently
                raise
            logger.warning("aioloader: skipping %r (index %d) as on_error asks", key, position)
            self._skipped += 1
            if len(self._skipped_keys) < MAX_SKIPPED_KEYS:
                self._skipped_keys.append(key)
            skipped: SampleT = self.fallback(position)
            return skipped
        extra = (key,) if self._decode_takes_key else ()
        result: SampleT = decode_named(self.decode, data, position, f"object {key!r}", *extra)
        return result

    async def get_samples(self, indices: Sequence[int]) -> list[SampleT]:
        """Fetch one batch's objects concurrently; results in the order of ``indices``.

        A failure carries a note naming its slot in ``indices`` and its dataset index.
        """

        async def read_slot(slot: int) -> SampleT:
            try:
                return await self.get_sample(indices[slot])
            except Exception as error:
                add_note(error, f"aioloader: reading slot {slot}, dataset index {indices[slot]}")
                raise

        return await gather_ordered(read_slot, range(len(indices)))
