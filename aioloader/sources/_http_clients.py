"""The HTTP client libraries ``HttpFetcher`` can drive: aiohttp (asyncio) and httpx (any).

``"auto"`` picks aiohttp on asyncio (and uvloop) when it is installed and httpx
elsewhere (trio). Measured on loopback with 128 requests in flight, aiohttp spent about
0.1 ms of CPU per request and httpx about 5 ms (httpcore's pool grows costly with many
connections), so on asyncio aiohttp is the one that keeps up; httpx is what runs on trio.

Each adapter opens one GET (redirects are not followed: ``HttpFetcher`` follows them,
checking every hop) and reports the response's status, headers (lower-case names), URL
and an async iterator of body chunks, and classifies its library's exceptions as
``(reason, detail, transient)``.

Both adapters resolve host names themselves and connect only to the addresses the
``AddressPolicy`` allows: aiohttp through a resolver that filters what the system resolver
answers, httpx through an httpcore network backend that resolves, checks and connects to
the checked address. (IP literals skip the resolver; ``HttpFetcher`` checks those.) This
holds whatever ``trust_env`` says: neither adapter ever sends a request through a proxy
named in the environment (a proxy connects on its own, where no check can follow), so
``trust_env`` only reads ``.netrc`` credentials, per host, the same on both.
"""

from __future__ import annotations

import contextlib
import netrc
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

from .._event_loops import AsyncioTimeoutError, running_asyncio_loop
from ._http_policy import AddressPolicy, BlockedAddressError, resolve
from ._http_result import FailureReason

__all__ = ("CLIENTS", "ClientAdapter", "Response", "make_client")

CLIENTS = ("auto", "aiohttp", "httpx")
_CHUNK = 64 * 1024


@dataclass
class Response:
    """What a GET answered, before its body is read."""

    status: int
    headers: dict[str, str]
    final_url: str
    chunks: AsyncIterator[bytes]


@dataclass(frozen=True)
class ClientSettings:
    """The settings every adapter honours."""

    max_in_flight: int
    connect_timeout: float | None
    read_timeout: float | None
    headers: dict[str, str]
    trust_env: bool
    transport: Any
    policy: AddressPolicy


class ClientAdapter:
    """One HTTP client library, bound to the running event loop."""

    name = ""

    def get(
        self, url: str, headers: dict[str, str]
    ) -> contextlib.AbstractAsyncContextManager[Response]:
        """Open a GET of ``url`` with ``headers`` (no redirect followed)."""
        raise NotImplementedError

    def classify(self, exc: BaseException) -> tuple[FailureReason, str, bool] | None:
        """(reason, detail, transient) of an exception of this library, or None."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close the connections."""
        raise NotImplementedError


def _read_netrc() -> netrc.netrc | None:
    """The ``.netrc`` file (``$NETRC`` or ``~/.netrc``), or None when absent or unreadable."""
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path)
    except (OSError, netrc.NetrcParseError):
        return None


class _Netrc:
    """``.netrc`` credentials per host, read once in a worker thread (``trust_env``)."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        self._file: netrc.netrc | None = None
        self._read = False

    async def credentials(self, url: str, headers: dict[str, str]) -> tuple[str, str] | None:
        """(login, password) for ``url``'s host, unless headers already authorise."""
        if not self._enabled or "authorization" in headers:
            return None
        if not self._read:
            import anyio

            self._file = await anyio.to_thread.run_sync(_read_netrc)
            self._read = True
        host = urlsplit(url).hostname
        found = None if self._file is None or not host else self._file.authenticators(host)
        return None if found is None else (found[0], found[2] or "")


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _blocked(exc: BaseException) -> BlockedAddressError | None:
    """The ``BlockedAddressError`` behind ``exc`` (itself, its cause or its ``os_error``)."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 5:
        if isinstance(current, BlockedAddressError):
            return current
        inner = getattr(current, "os_error", None)
        current = inner if isinstance(inner, BaseException) else current.__cause__
        seen += 1
    return None


def _refused(exc: BaseException) -> tuple[FailureReason, str, bool] | None:
    blocked = _blocked(exc)
    if blocked is None:
        return None
    return "blocked_address", f"address not allowed: {_first_line(blocked)}", False


def _connection(exc: BaseException) -> tuple[FailureReason, str, bool]:
    name = type(exc).__name__
    text = _first_line(exc)
    what = "connection reset or closed" if text in ("", name) else text
    return "connection", f"{what} ({name})", True


class _Aiohttp(ClientAdapter):
    name = "aiohttp"

    def __init__(self, settings: ClientSettings) -> None:
        import aiohttp

        self._aiohttp = aiohttp
        self._settings = settings
        self._netrc = _Netrc(settings.trust_env)
        connector = aiohttp.TCPConnector(
            limit=settings.max_in_flight,
            limit_per_host=0,
            ttl_dns_cache=300,
            resolver=cast(Any, _PolicyResolver(settings.policy)),
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(
                total=None,
                sock_connect=settings.connect_timeout,
                sock_read=settings.read_timeout,
            ),
            trust_env=False,  # never a proxy from the environment (see the module's doc)
            auto_decompress=True,
        )

    @contextlib.asynccontextmanager
    async def get(self, url: str, headers: dict[str, str]) -> AsyncIterator[Response]:
        login = await self._netrc.credentials(url, headers)
        auth = None if login is None else self._aiohttp.BasicAuth(*login)
        request = self._session.get(url, allow_redirects=False, headers=headers, auth=auth)
        async with request as response:
            headers = {k.lower(): v for k, v in response.headers.items()}
            yield Response(
                response.status,
                headers,
                str(response.url),
                response.content.iter_chunked(_CHUNK),
            )

    def classify(self, exc: BaseException) -> tuple[FailureReason, str, bool] | None:
        aiohttp = self._aiohttp
        refused = _refused(exc)
        if refused is not None:
            return refused
        if isinstance(exc, (AsyncioTimeoutError, aiohttp.ServerTimeoutError)):
            kind = "connect" if "connect" in type(exc).__name__.lower() else "read"
            return "timeout", f"{kind} timed out", True
        if isinstance(exc, aiohttp.InvalidURL):
            return "invalid_url", _first_line(exc), False
        if isinstance(exc, aiohttp.ClientPayloadError) and "encoding" in str(exc).lower():
            return "decode", f"body does not decode: {_first_line(exc)}", False
        if isinstance(exc, aiohttp.ClientConnectorError):
            return "connection", f"cannot connect: {_first_line(exc)}", True
        if isinstance(exc, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)):
            return _connection(exc)
        if isinstance(exc, aiohttp.ClientError):
            return "connection", f"{type(exc).__name__}: {_first_line(exc)}", False
        return None

    async def aclose(self) -> None:
        await self._session.close()


class _PolicyResolver:
    """aiohttp's resolver protocol: the system's answers, less the refused addresses."""

    def __init__(self, policy: AddressPolicy) -> None:
        self._policy = policy

    async def resolve(self, host: str, port: int = 0, family: int = 0) -> list[dict[str, Any]]:
        found = await resolve(host, port)
        allowed = set(self._policy.allowed(host, [address for _, address in found]))
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": fam,
                "proto": 0,
                "flags": 0,
            }
            for fam, address in found
            if address in allowed and (family in (0, fam))
        ]

    async def close(self) -> None:
        """Nothing to release."""


class _Httpx(ClientAdapter):
    name = "httpx"

    def __init__(self, settings: ClientSettings) -> None:
        import httpx

        self._httpx = httpx
        self._settings = settings
        self._netrc = _Netrc(settings.trust_env)
        timeout = httpx.Timeout(
            connect=settings.connect_timeout,
            read=settings.read_timeout,
            write=settings.read_timeout,
            pool=None,
        )
        limits = httpx.Limits(
            max_connections=settings.max_in_flight,
            max_keepalive_connections=settings.max_in_flight,
            keepalive_expiry=5.0,
        )
        transport = settings.transport
        if transport is None:
            from ._http_transport import PolicyTransport

            transport = PolicyTransport(settings.policy, limits)
        self._client = httpx.AsyncClient(
            timeout=timeout,
            limits=limits,
            follow_redirects=False,
            trust_env=False,  # never a proxy from the environment (see the module's doc)
            transport=transport,
        )

    @contextlib.asynccontextmanager
    async def get(self, url: str, headers: dict[str, str]) -> AsyncIterator[Response]:
        auth = await self._netrc.credentials(url, headers)
        request = self._client.stream("GET", url, headers=headers, auth=auth)
        async with request as response:
            headers = {k.lower(): v for k, v in response.headers.items()}
            chunks = _HttpxChunks(response)
            try:
                yield Response(response.status_code, headers, str(response.url), chunks)
            finally:
                await chunks.aclose()

    def classify(self, exc: BaseException) -> tuple[FailureReason, str, bool] | None:
        httpx = self._httpx
        refused = _refused(exc)
        if refused is not None:
            return refused
        if isinstance(exc, httpx.TimeoutException):
            kind = type(exc).__name__.replace("Timeout", "").lower() or "request"
            return "timeout", f"{kind} timed out", True
        if isinstance(exc, (httpx.InvalidURL, httpx.UnsupportedProtocol)):
            return "invalid_url", _first_line(exc), False
        if isinstance(exc, httpx.DecodingError):
            return "decode", f"body does not decode: {_first_line(exc)}", False
        if isinstance(exc, httpx.ConnectError):
            return "connection", f"cannot connect: {_first_line(exc)}", True
        if isinstance(exc, httpx.TransportError):
            return _connection(exc)
        if isinstance(exc, httpx.HTTPError):
            return "connection", f"{type(exc).__name__}: {_first_line(exc)}", False
        return None

    async def aclose(self) -> None:
        await self._client.aclose()


class _HttpxChunks:
    """``response.aiter_bytes()`` that can be abandoned midway without leaking generators.

    httpx nests several async generators; closing the outer one leaves the inner ones to
    the garbage collector (which trio reports as a ResourceWarning). Closing the response
    first and then running the generators to their end finishes every one of them.
    """

    def __init__(self, response: Any) -> None:
        self._response = response
        self._chunks = response.aiter_bytes()
        self._done = False

    def __aiter__(self) -> _HttpxChunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk: bytes = await self._chunks.__anext__()
        except BaseException:
            self._done = True
            raise
        return chunk

    async def aclose(self) -> None:
        if self._done:
            return
        self._done = True
        await self._response.aclose()
        with contextlib.suppress(Exception):
            async for _ in self._chunks:
                pass


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def make_client(choice: str, settings: ClientSettings) -> ClientAdapter:
    """The adapter for ``choice`` (``"auto"``, ``"aiohttp"``, ``"httpx"``) on this loop."""
    on_asyncio = running_asyncio_loop() is not None
    asked = choice
    if choice == "auto":
        use_aiohttp = on_asyncio and settings.transport is None and _installed("aiohttp")
        choice = "aiohttp" if use_aiohttp else "httpx"
    if choice == "aiohttp":
        if not on_asyncio:
            raise RuntimeError(
                "client='aiohttp' runs on asyncio only; on trio use client='httpx' or 'auto'"
            )
        if settings.transport is not None:
            raise ValueError("transport is an httpx transport; it needs client='httpx'")
        try:
            return _Aiohttp(settings)
        except ImportError:
            raise ImportError(
                "client='aiohttp' needs aiohttp: pip install 'aioloader[http]'"
            ) from None
    try:
        return _Httpx(settings)
    except ImportError:
        if asked == "httpx":
            needs = "client='httpx' needs httpx"
        elif on_asyncio:
            needs = "HttpFetcher needs aiohttp (or httpx) on asyncio"
        else:
            needs = "HttpFetcher needs httpx on trio"
        raise ImportError(f"{needs}: pip install 'aioloader[http]'") from None
