"""The outcome of fetching one URL: its body, or a failure record with its reason."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from ._retry import RequestCounters

__all__ = ("FAILURE_REASONS", "FailureReason", "FetchResult", "HttpStatistics", "retry_after")

FailureReason = Literal[
    "status",
    "timeout",
    "too_large",
    "content_type",
    "connection",
    "redirects",
    "invalid_url",
    "decode",
    "blocked_address",
]
FAILURE_REASONS: tuple[FailureReason, ...] = get_args(FailureReason)
"""Why a fetch failed: an HTTP status that is not 2xx (after retries), a timeout (connect,
read, the attempt's ``total_timeout``, or a body slower than ``min_rate``), a body past
``max_body_bytes``, a content type not allowed, a connection refused or reset (after
retries), too many redirects, a URL that cannot be fetched at all (not http(s): also a
redirect to ``file:`` or ``ftp:``), a body that does not decode (a bad
``Content-Encoding`` here; ingestion also uses it for images that do not decode), or a
host whose addresses the ``AddressPolicy`` refuses (``blocked_address``)."""


@dataclass(frozen=True)
class FetchResult:
    """What became of one URL: ``ok`` with a body, or a failure with its ``reason``.

    Attributes:
        url: The URL asked for.
        body: The body (``ok`` only), else None.
        status: The last HTTP status seen, or None when no response came.
        headers: The response's headers (lower-case names), empty when none came.
        final_url: The URL after redirects (``url`` when none were followed).
        reason: None when ``ok``; else one of ``FAILURE_REASONS``.
        detail: A short human-readable account of the failure ("HTTP 404", "read timed out").
        attempts: Attempts made, retries included.
    """

    url: str
    body: bytes | None
    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    final_url: str = ""
    reason: FailureReason | None = None
    detail: str = ""
    attempts: int = 1

    @property
    def ok(self) -> bool:
        """Whether the body arrived."""
        return self.reason is None

    @property
    def content_type(self) -> str:
        """The media type of the response, without parameters ("" when none)."""
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()


@dataclass(frozen=True)
class HttpStatistics(RequestCounters):
    """Counters of an ``HttpFetcher``.

    ``requests`` and ``retries`` (``RequestCounters``) come first, then these.

    Attributes:
        ok: URLs fetched.
        failed: URLs that ended as a failure record.
        failures: Failed URLs by reason.
        bytes_read: Body bytes delivered.
        in_flight: Requests in flight now.
        hosts: Hosts with a request in flight or waiting now.
        client: The client library of the running loop ("aiohttp", "httpx"; "" before use).
            aiohttp retries a request once by itself when a connection drops, so a server
            may see up to two requests per attempt.
    """

    ok: int
    failed: int
    failures: Mapping[str, int]
    bytes_read: int
    in_flight: int
    hosts: int
    client: str = ""


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds asked for by a ``Retry-After`` header (delta seconds or an HTTP date).

    >>> retry_after("3"), retry_after(None), retry_after("soon")
    (3.0, None, None)
    """
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)
