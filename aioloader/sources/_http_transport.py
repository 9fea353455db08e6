"""An httpx transport that connects only to addresses an ``AddressPolicy`` allows.

httpx's own transport resolves names inside its network backend, out of reach. This one
drives an httpcore connection pool whose network backend resolves the host, drops the
refused addresses (``BlockedAddressError`` when none is left) and connects to a checked
address, so the address that was checked is the one connected to. TLS still verifies
the certificate against the host name (httpcore passes the URL's host as the server name).
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import httpcore
import httpx

from ._http_policy import AddressPolicy, resolve

__all__ = ("PolicyTransport",)


@contextlib.contextmanager
def _as_httpx(request: httpx.Request) -> Iterator[None]:
    """Raise httpcore's exceptions as httpx's of the same name (as httpx's transport does)."""
    try:
        yield
    except httpcore.UnsupportedProtocol as exc:
        raise httpx.UnsupportedProtocol(str(exc), request=request) from exc
    except Exception as exc:
        if not type(exc).__module__.startswith("httpcore"):
            raise
        kind = getattr(httpx, type(exc).__name__, httpx.TransportError)
        if not (isinstance(kind, type) and issubclass(kind, httpx.TransportError)):
            kind = httpx.TransportError
        raise kind(str(exc), request=request) from exc


class _PolicyBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, policy: AddressPolicy) -> None:
        self._policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        found = await resolve(host, port)
        allowed = self._policy.allowed(host, [address for _, address in found])
        error: OSError | None = None
        for address in allowed:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except httpcore.ConnectError as exc:
                error = exc  # type: ignore[assignment]  # tried in turn, like a happy client
            except OSError as exc:
                error = exc
        assert error is not None
        raise error

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _Body(httpx.AsyncByteStream):
    def __init__(self, stream: Any, request: httpx.Request) -> None:
        self._stream = stream
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx(self._request):
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            with _as_httpx(self._request):
                await close()


class PolicyTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over connections checked by ``policy``."""

    def __init__(self, policy: AddressPolicy, limits: httpx.Limits) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl.create_default_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_PolicyBackend(policy),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx(request):
            answer = await self._pool.handle_async_request(core)
        return httpx.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_Body(answer.stream, request),
            extensions=answer.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()
