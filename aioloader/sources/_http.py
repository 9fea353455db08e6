"""Fetch arbitrary URLs across many hosts: bounded, timed, retried, size-capped.

Every URL ends as exactly one ``FetchResult``: the body, or a failure record with its
reason (see ``FAILURE_REASONS``). ``fetch`` never raises for a failed URL; only
cancellation (and bad arguments) leave it by an exception. So a pipeline built on it
loses nothing: each input comes out once, as a sample or as a failure.

The client library: aiohttp on asyncio (and uvloop), httpx on trio (``client="auto"``);
see ``_http_clients`` for why (httpx alone runs everywhere, but costs about 50 times more
CPU per request than aiohttp with many requests in flight).

Bounds: at most ``max_in_flight`` requests in flight in all, and ``max_per_host`` per host
(keyed by the host of the URL asked for; redirects are followed within the same slot). A
request waits for its host's slot first, then for a global one, so one slow host cannot
hold the global slots while its own requests queue. Between retries a URL keeps its
host's slot (that host sees no more pressure) but gives the global one back.

Retries: HTTP 408, 429 and 5xx, connection errors (refused, reset, closed before a full
response) and timeouts are transient and retried under ``RetryPolicy`` (exponential
backoff with seeded jitter). A ``Retry-After`` header (seconds or an HTTP date) lengthens
the wait to what the server asked, up to ``max_retry_after`` seconds; a server asking for
more ends the URL at once with reason ``"status"``. Other statuses are final.

Bounded time: each attempt has a deadline, ``total_timeout`` (60 s by default), and a body
must arrive at ``min_rate`` bytes per second or more (1 KiB/s by default), measured over
each ``min_rate_grace`` seconds (10 s): a server that trickles a body fails as
``"timeout"`` with the measured rate in the detail, after one grace period, and is not
retried (it would trickle again). So with the defaults a URL takes at most about
``max_attempts`` x 60 s plus the backoff, however its server behaves.

Addresses: redirects are followed here, not by the client library, and each hop's host
is checked by the ``AddressPolicy`` (see ``_http_policy``): by default only public
addresses; a refused one ends the URL as ``"blocked_address"``, a redirect to a scheme
other than http(s) as ``"invalid_url"``, the same on both client libraries and whatever
``trust_env`` says (no proxy from the environment is ever used).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import anyio

from .._ordered import Bound
from ..core import at_least, instance_not_bool, positive
from ._concurrency import PerLoop
from ._http_clients import CLIENTS, ClientAdapter, ClientSettings, make_client
from ._http_policy import AddressPolicy, as_policy
from ._http_result import FailureReason, FetchResult, HttpStatistics, retry_after
from ._retry import RetryPolicy

__all__ = ("HttpFetcher",)

DEFAULT_USER_AGENT = "aioloader (+https://pypi.org/project/aioloader)"
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
_CREDENTIAL_HEADERS = ("authorization", "cookie", "proxy-authorization")

clock = time.monotonic
"""Seconds, read by the ``min_rate`` windows (tests replace it with a fake clock)."""


def _timeout(name: str, value: Any) -> float | None:
    if value is None:
        return None
    rule = "a number > 0 or None"
    if not instance_not_bool(name, value, (int, float), rule) > 0:
        raise ValueError(f"{name} must be {rule} but got {value!r}")
    return float(value)


def _content_types(value: Sequence[str] | None) -> tuple[str, ...] | None:
    """The accepted media types, lowercased (None accepts any)."""
    if isinstance(value, str):
        raise TypeError(
            f"content_types must be a sequence of media types but got the str "
            f"{value!r}; write ({value!r},)"
        )
    return None if value is None else tuple(t.lower() for t in value)


def _retry_policy(retry: RetryPolicy | None) -> RetryPolicy:
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise TypeError(f"retry must be a RetryPolicy but got {type(retry).__name__}")
    return retry or RetryPolicy(max_attempts=3, initial_backoff=0.5, max_backoff=10.0)


def _max_retry_after(value: Any) -> float:
    if not (isinstance(value, (int, float)) and 0 <= value < 1e9):
        raise ValueError(f"max_retry_after must be a number >= 0 but got {value!r}")
    return float(value)


class _HostSlots:
    """One bound per host with a request in flight or waiting; idle hosts are dropped."""

    def __init__(self, per_host: int) -> None:
        self._per_host = per_host
        self._slots: dict[str, list[Any]] = {}  # host -> [bound, holders and waiters]

    def __len__(self) -> int:
        return len(self._slots)

    @contextlib.asynccontextmanager
    async def hold(self, host: str) -> AsyncIterator[None]:
        entry = self._slots.get(host)
        if entry is None:
            entry = self._slots[host] = [Bound(self._per_host), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._slots[host]


@dataclass
class _LoopState:
    client: ClientAdapter
    limit: Bound
    hosts: _HostSlots


async def _close_state(state: _LoopState) -> None:
    await state.client.aclose()


@dataclass
class _Attempt:
    result: FetchResult
    transient: bool = False
    wait_hint: float | None = None


class HttpFetcher:
    """Fetches URLs over HTTP(S) with global and per-host bounds, timeouts and retries.

    Use it as an async context manager (or call ``aclose``) to close its connections.

        async with HttpFetcher(max_in_flight=256, max_per_host=8) as fetcher:
            result = await fetcher.fetch("https://example.com/a.jpg")
            if result.ok:
                ...  # result.body
            else:
                ...  # result.reason, result.detail

    Args:
        max_in_flight: Most requests in flight at once, over all hosts.
        max_per_host: Most requests in flight to one host.
        connect_timeout: Seconds to open a connection (None: no limit).
        read_timeout: Seconds allowed between two reads of a response (None: no limit).
        total_timeout: Seconds allowed for one attempt, redirects and body included
            (None: no limit); fails as ``"timeout"`` and is retried.
        min_rate: Slowest body accepted, in bytes per second (None: any); catches
            servers that trickle a body slowly enough to dodge ``read_timeout``. A body
            slower than this over a ``min_rate_grace`` window fails as ``"timeout"``
            (not retried) with the measured rate in the detail.
        min_rate_grace: Seconds over which ``min_rate`` is measured (each window in turn).
        retry: Retry policy for transient failures (default: 3 attempts).
        max_body_bytes: Largest body accepted; a longer one is cut off as ``"too_large"``.
        content_types: Media types accepted (``"image/"`` accepts every ``image/...``);
            None accepts any.
        max_redirects: Redirects followed before failing with ``"redirects"``.
        max_retry_after: Longest ``Retry-After`` wait honoured, in seconds.
        headers: Extra request headers (a ``User-Agent`` is sent unless given here).
        trust_env: Whether ``.netrc`` credentials (``$NETRC`` or ``~/.netrc``) are sent,
            per host. Proxy settings in the environment (``HTTP_PROXY``, ``HTTPS_PROXY``,
            ``ALL_PROXY``) are never used, whatever this says: a proxy connects on its
            own, out of the address policy's reach.
        client: ``"auto"`` (aiohttp on asyncio when installed, else httpx), ``"aiohttp"``
            (asyncio only) or ``"httpx"``.
        transport: An httpx async transport to send requests through (``client="httpx"``;
            tests, custom TLS, a proxy you choose). It connects on its own, so host names
            it resolves are not checked by ``allow``'s policy (IP literals still are).
        allow: The ``AddressPolicy``, or what it allows besides public addresses: CIDRs,
            addresses and host names (``["127.0.0.1"]``, ``["10.0.0.0/8"]``). Default:
            loopback, link-local, private, multicast, reserved and unspecified addresses
            are refused (``"blocked_address"``), on every hop.
    """

    def __init__(
        self,
        *,
        max_in_flight: int = 256,
        max_per_host: int = 16,
        connect_timeout: float | None = 10.0,
        read_timeout: float | None = 30.0,
        total_timeout: float | None = 60.0,
        min_rate: float | None = 1024.0,
        min_rate_grace: float = 10.0,
        retry: RetryPolicy | None = None,
        max_body_bytes: int = 32 * 1024 * 1024,
        content_types: Sequence[str] | None = None,
        max_redirects: int = 5,
        max_retry_after: float = 30.0,
        headers: Mapping[str, str] | None = None,
        trust_env: bool = False,
        client: str = "auto",
        transport: Any = None,
        allow: AddressPolicy | Sequence[str] | None = None,
    ) -> None:
        if client not in CLIENTS:
            raise ValueError(f"client must be one of {', '.join(CLIENTS)} but got {client!r}")
        self.client = client
        self.max_in_flight = positive("max_in_flight", max_in_flight)
        self.max_per_host = positive("max_per_host", max_per_host)
        self.connect_timeout = _timeout("connect_timeout", connect_timeout)
        self.read_timeout = _timeout("read_timeout", read_timeout)
        self.total_timeout = _timeout("total_timeout", total_timeout)
        self.min_rate = _timeout("min_rate", min_rate)
        grace = _timeout("min_rate_grace", min_rate_grace)
        if grace is None:
            raise ValueError("min_rate_grace must be a number > 0 but got None")
        self.min_rate_grace = grace
        self.policy = as_policy(allow)
        self.retry = _retry_policy(retry)
        self.max_body_bytes = positive("max_body_bytes", max_body_bytes)
        self.content_types = _content_types(content_types)
        self.max_redirects = at_least("max_redirects", max_redirects, 0)
        self.max_retry_after = _max_retry_after(max_retry_after)
        self.headers = {"user-agent": DEFAULT_USER_AGENT}
        self.headers.update({k.lower(): v for k, v in (headers or {}).items()})
        self.trust_env = bool(trust_env)
        self._transport = transport
        self._state: PerLoop[_LoopState] = PerLoop(self._new_state, _close_state)
        self._requests = self._retries = self._ok = self._failed = 0
        self._bytes = self._in_flight = 0
        self._failures: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"HttpFetcher(max_in_flight={self.max_in_flight}, max_per_host={self.max_per_host})"

    def _new_state(self) -> _LoopState:
        settings = ClientSettings(
            max_in_flight=self.max_in_flight,
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            headers=self.headers,
            trust_env=self.trust_env,
            transport=self._transport,
            policy=self.policy,
        )
        client = make_client(self.client, settings)
        return _LoopState(client, Bound(self.max_in_flight), _HostSlots(self.max_per_host))

    def statistics(self) -> HttpStatistics:
        """A snapshot of the counters."""
        state = self._state.peek()
        return HttpStatistics(
            requests=self._requests,
            retries=self._retries,
            ok=self._ok,
            failed=self._failed,
            failures=dict(sorted(self._failures.items())),
            bytes_read=self._bytes,
            in_flight=self._in_flight,
            hosts=0 if state is None else len(state.hosts),
            client="" if state is None else state.client.name,
        )

    async def aclose(self) -> None:
        """Close the connections of the running event loop's client.

        A client is also closed when the event loop it was built on ends.
        """
        await self._state.aclose()

    async def __aenter__(self) -> HttpFetcher:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def fetch(self, url: str) -> FetchResult:
        """Fetch ``url``: its body, or a failure record. Never raises for a failed URL."""
        if not isinstance(url, str):
            raise TypeError(f"url must be a str but got {type(url).__name__}")
        host = self._host(url)
        if host is None:
            return self._finish(
                FetchResult(url, None, final_url=url, reason="invalid_url", attempts=0,
                            detail="not an http(s) URL with a host")
            )  # fmt: skip
        state = self._state.get()
        attempt = 0
        async with state.hosts.hold(host):
            while True:
                attempt += 1
                async with state.limit:
                    with anyio.move_on_after(self.total_timeout) as deadline:
                        outcome = await self._attempt(state.client, url, attempt)
                if deadline.cancelled_caught:
                    detail = f"attempt took longer than total_timeout={self.total_timeout:g} s"
                    failure = FetchResult(url, None, final_url=url, reason="timeout",
                                          detail=detail, attempts=attempt)  # fmt: skip
                    outcome = _Attempt(failure, transient=True)
                result = outcome.result
                if result.ok or not outcome.transient or attempt >= self.retry.max_attempts:
                    return self._finish(result)
                wait = self.retry.backoff(url, attempt)
                if outcome.wait_hint is not None:
                    if outcome.wait_hint > self.max_retry_after:
                        detail = (
                            f"{result.detail}; Retry-After {outcome.wait_hint:.0f} s exceeds "
                            f"max_retry_after={self.max_retry_after:g}"
                        )
                        return self._finish(_with(result, detail=detail))
                    wait = max(wait, outcome.wait_hint)
                self._retries += 1
                await anyio.sleep(wait)

    def _host(self, url: str) -> str | None:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            return None
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            return None
        return f"{parts.hostname}:{port or ''}"

    def _finish(self, result: FetchResult) -> FetchResult:
        if result.ok:
            self._ok += 1
            self._bytes += len(result.body or b"")
        else:
            self._failed += 1
            reason = str(result.reason)
            self._failures[reason] = self._failures.get(reason, 0) + 1
        return result

    def _accepts(self, content_type: str) -> bool:
        if self.content_types is None:
            return True
        return any(
            content_type == allowed or (allowed.endswith("/") and content_type.startswith(allowed))
            for allowed in self.content_types
        )

    def _refusal(self, url: str) -> tuple[FailureReason, str] | None:
        """Why a hop to ``url`` is not made (scheme, host, address policy), or None."""
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018  # raises ValueError for a bad port
        except ValueError:
            return "invalid_url", f"not a valid URL: {url[:200]!r}"
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            return "invalid_url", f"only http(s) URLs are fetched, not {scheme or '(none)'}:"
        if not parts.hostname:
            return "invalid_url", "not an http(s) URL with a host"
        refused = self.policy.literal_refusal(parts.hostname)
        return None if refused is None else ("blocked_address", f"address not allowed: {refused}")

    async def _attempt(self, client: ClientAdapter, url: str, attempt: int) -> _Attempt:
        self._requests += 1
        self._in_flight += 1
        current = url
        headers = self.headers

        def failed(reason: FailureReason, detail: str, **extra: Any) -> FetchResult:
            return FetchResult(url, None, reason=reason, detail=detail, attempts=attempt,
                               final_url=extra.pop("final_url", current), **extra)  # fmt: skip

        try:
            hop = 0
            while True:  # the last hop allowed fails as "redirects" rather than redirect
                refused = self._refusal(current)
                if refused is not None:
                    return _Attempt(failed(*refused))
                outcome = await self._hop(client, current, headers, (hop, attempt), failed)
                if isinstance(outcome, _Attempt):
                    return outcome
                if urlsplit(outcome)[:2] != urlsplit(current)[:2]:  # another origin
                    headers = {k: v for k, v in headers.items() if k not in _CREDENTIAL_HEADERS}
                current = outcome
                hop += 1
        except Exception as exc:
            known = client.classify(exc)
            if known is None:
                raise
            reason, detail, transient = known
            return _Attempt(failed(reason, detail), transient=transient)
        finally:
            self._in_flight -= 1

    async def _hop(
        self,
        client: ClientAdapter,
        url: str,
        headers: dict[str, str],
        counts: tuple[int, int],
        failed: Any,
    ) -> _Attempt | str:
        """One request: its outcome, or the URL a redirect points to."""
        hop, attempt = counts
        async with client.get(url, headers) as response:
            status, response_headers = response.status, response.headers
            meta: dict[str, Any] = {
                "status": status,
                "headers": response_headers,
                "final_url": response.final_url,
            }
            location = response_headers.get("location")
            if status in REDIRECT_STATUS and location:
                if hop >= self.max_redirects:
                    detail = f"more than {self.max_redirects} redirects"
                    return _Attempt(failed("redirects", detail, **meta))
                return urljoin(url, location)
            if not 200 <= status < 300:
                transient = status in TRANSIENT_STATUS or status >= 500
                hint = retry_after(response_headers.get("retry-after")) if transient else None
                return _Attempt(failed("status", f"HTTP {status}", **meta), transient, hint)
            content_type = response_headers.get("content-type", "").split(";", 1)[0]
            content_type = content_type.strip().lower()
            if not self._accepts(content_type):
                allowed = ", ".join(self.content_types or ())
                detail = f"content type {content_type or '(none)'!r} is not one of {allowed}"
                return _Attempt(failed("content_type", detail, **meta))
            declared = response_headers.get("content-length", "")
            too_large = f"body exceeds max_body_bytes={self.max_body_bytes}"
            if declared.isdigit() and int(declared) > self.max_body_bytes:
                return _Attempt(failed("too_large", f"{too_large} ({declared})", **meta))
            chunks = []
            size = 0
            rate = _RateWatch(self.min_rate, self.min_rate_grace)
            async for chunk in response.chunks:
                size += len(chunk)
                if size > self.max_body_bytes:
                    return _Attempt(failed("too_large", too_large, **meta))
                chunks.append(chunk)
                slow = rate.add(len(chunk))
                if slow is not None:
                    return _Attempt(failed("timeout", slow, **meta))
            body = b"".join(chunks)
            return _Attempt(FetchResult(url, body, attempts=attempt, **meta))


class _RateWatch:
    """Flags a body slower than ``min_rate`` bytes/s over a window of ``grace`` seconds."""

    __slots__ = ("_bytes", "_grace", "_min_rate", "_start")

    def __init__(self, min_rate: float | None, grace: float) -> None:
        self._min_rate = min_rate
        self._grace = grace
        self._start = clock()
        self._bytes = 0

    def add(self, size: int) -> str | None:
        """Count ``size`` bytes; a failure detail when a window closed below the rate."""
        if self._min_rate is None:
            return None
        self._bytes += size
        now = clock()
        elapsed = now - self._start
        if elapsed < self._grace:
            return None
        rate = self._bytes / elapsed
        if rate < self._min_rate:
            return (
                f"body arrived at {rate:.1f} B/s over {elapsed:.1f} s, below "
                f"min_rate={self._min_rate:g} B/s"
            )
        self._start, self._bytes = now, 0
        return None


def _with(result: FetchResult, **changes: Any) -> FetchResult:
    return dataclasses.replace(result, **changes)
