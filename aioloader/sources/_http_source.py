"""A dataset of URLs: sample ``i`` is the body of ``urls[i]``, fetched by an ``HttpFetcher``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar, overload

from .._errors import ObjectNotFoundError, SourceError
from ._concurrency import gather_ordered
from ._decode import decode_bytes, decode_named
from ._http import HttpFetcher
from ._http_result import FetchResult, HttpStatistics
from ._local import check_index

__all__ = ("HttpFetchError", "HttpSource")

SampleT = TypeVar("SampleT")


class HttpFetchError(SourceError):
    """A URL ended as a failure record; ``result`` holds it (reason, status, detail)."""

    def __init__(self, message: str, result: FetchResult) -> None:
        super().__init__(message)
        self.result = result


class HttpNotFoundError(HttpFetchError, ObjectNotFoundError):
    """A URL answered HTTP 404 or 410."""


class HttpSource(Generic[SampleT]):
    """Samples fetched from URLs: index-addressable, for the ``DataLoader``.

    A URL that fails raises ``HttpFetchError`` (``HttpNotFoundError`` for 404 and 410)
    carrying its ``FetchResult``; for ingestion, where failures are records rather than
    errors, use ``HttpFetcher.fetch`` (or ``aioloader.ingest``) instead. Connections
    belong to the event loop that opened them: call ``await source.aclose()`` on that loop
    when done.

    Args:
        urls: The URLs, in index order.
        fetcher: The ``HttpFetcher`` to use (bounds, timeouts, retries); a default one
            when None.
        decode: ``decode(body, index) -> sample``; the default returns the bytes.
    """

    @overload
    def __init__(
        self: HttpSource[bytes], urls: Sequence[str], *, fetcher: HttpFetcher | None = None
    ) -> None: ...

    @overload
    def __init__(
        self,
        urls: Sequence[str],
        *,
        fetcher: HttpFetcher | None = None,
        decode: Callable[[bytes, int], SampleT],
    ) -> None: ...

    def __init__(
        self,
        urls: Sequence[str],
        *,
        fetcher: HttpFetcher | None = None,
        decode: Callable[[bytes, int], Any] = decode_bytes,
    ) -> None:
        if isinstance(urls, str):
            raise TypeError("urls must be a sequence of URLs but got a single str")
        for position, url in enumerate(urls):
            if not isinstance(url, str):
                raise TypeError(f"urls[{position}] must be a str but got {type(url).__name__}")
        if fetcher is not None and not isinstance(fetcher, HttpFetcher):
            raise TypeError(f"fetcher must be an HttpFetcher but got {type(fetcher).__name__}")
        if not callable(decode):
            raise TypeError(f"decode must be callable but got {type(decode).__name__}")
        self.urls: tuple[str, ...] = tuple(urls)
        self.fetcher = fetcher if fetcher is not None else HttpFetcher()
        self.decode = decode

    def __len__(self) -> int:
        return len(self.urls)

    def __repr__(self) -> str:
        return f"HttpSource({len(self.urls)} URLs, {self.fetcher!r})"

    def statistics(self) -> HttpStatistics:
        """The fetcher's counters."""
        return self.fetcher.statistics()

    async def aclose(self) -> None:
        """Close the fetcher's connections."""
        await self.fetcher.aclose()

    async def get_sample(self, index: int) -> SampleT:
        """Fetch ``urls[index]`` and decode it; a failed URL raises ``HttpFetchError``."""
        position = check_index(index, len(self.urls))
        url = self.urls[position]
        result = await self.fetcher.fetch(url)
        if result.body is None:
            kind = HttpNotFoundError if result.status in (404, 410) else HttpFetchError
            raise kind(
                f"fetching {url!r} (sample {position}) failed: {result.reason}: "
                f"{result.detail} after {result.attempts} attempt(s)",
                result,
            )
        sample: SampleT = decode_named(self.decode, result.body, position, repr(url))
        return sample

    async def get_samples(self, indices: Sequence[int]) -> list[SampleT]:
        """Fetch one batch's URLs concurrently; results in the order of ``indices``."""
        return await gather_ordered(self.get_sample, indices)
