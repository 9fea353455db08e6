"""A TCP relay on loopback that delays every client-to-server chunk: latency for benchmarks.

With HTTP/1.1 keep-alive each request reaches the server as one chunk, so each request gets
``delay`` seconds of extra latency. Nothing is parsed, which makes it far cheaper than
``proxy.LoopbackProxy``, whose thread and lifecycle it shares; it cannot inject faults.
``statistics()`` counts requests (request lines ending in `` HTTP/1.1``, seen in the
client-to-server bytes) and the bytes relayed each way, for benchmarks that report requests
and bytes fetched per epoch.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from dataclasses import dataclass
from typing import Any, cast

from .proxy import LoopbackProxy

__all__ = ("LatencyRelay", "RelayStatistics")

_REQUEST_LINE_END = b" HTTP/1.1\r\n"


@dataclass(frozen=True)
class RelayStatistics:
    """Requests seen and bytes relayed since start (or the last ``reset_statistics``)."""

    requests: int
    bytes_to_server: int
    bytes_to_client: int


class _RelayUpstream(asyncio.Protocol):
    def __init__(self, client: asyncio.Transport, relay: LatencyRelay) -> None:
        self.client = client
        self.relay = relay

    def data_received(self, data: bytes) -> None:
        self.relay._bytes_to_client += len(data)
        self.client.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()


class _RelayClient(asyncio.Protocol):
    """One client connection: its bytes reach upstream ``delay`` s late, answers at once."""

    def __init__(self, relay: LatencyRelay) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.flush_handle: asyncio.TimerHandle | None = None
        self.tail = b""  # the end of the previous chunk: a request line may straddle two

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        client = self.transport = cast(asyncio.Transport, transport)
        self.relay._transports.add(client)
        loop = asyncio.get_running_loop()
        task = loop.create_task(
            loop.create_connection(
                lambda: _RelayUpstream(client, self.relay), *self.relay._upstream
            )
        )
        task.add_done_callback(self._connected)

    def _connected(self, task: asyncio.Task[tuple[asyncio.BaseTransport, Any]]) -> None:
        if task.cancelled() or task.exception() is not None or self.transport is None:
            if self.transport is not None:
                self.transport.abort()
            return
        self.upstream = cast(asyncio.Transport, task.result()[0])
        self.relay._transports.add(self.upstream)
        self._flush()

    def data_received(self, data: bytes) -> None:
        relay = self.relay
        relay._bytes_to_server += len(data)
        window = self.tail + data
        relay._requests += window.count(_REQUEST_LINE_END)
        self.tail = window[-(len(_REQUEST_LINE_END) - 1) :]
        loop = asyncio.get_running_loop()
        self.queue.append((loop.time() + self.relay.delay, data))
        if self.flush_handle is None:
            self.flush_handle = loop.call_at(self.queue[0][0], self._flush)

    def _flush(self) -> None:
        self.flush_handle = None
        if self.upstream is None:
            return  # _connected flushes
        if self.upstream.is_closing():  # the server closed it (the client is closed too):
            self.queue.clear()  # what waits has nowhere to go
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self.queue and self.queue[0][0] <= now:
            self.upstream.write(self.queue.popleft()[1])
        if self.queue:
            self.flush_handle = loop.call_at(self.queue[0][0], self._flush)

    def pause_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.flush_handle is not None:
            self.flush_handle.cancel()
        for transport in (self.transport, self.upstream):
            if transport is not None:
                self.relay._transports.discard(transport)
        if self.upstream is not None:
            self.upstream.close()


class LatencyRelay(LoopbackProxy):
    """Relay TCP from a free loopback port to ``upstream``, ``delay`` s late one way.

    Args:
        upstream: ``http://host:port`` of the real server.
        delay: Seconds each client-to-server chunk is held back.
        use_uvloop: Run the relay's event loop on uvloop.
    """

    def __init__(self, upstream: str, *, delay: float = 0.0, use_uvloop: bool = False) -> None:
        super().__init__(upstream, delay=delay, use_uvloop=use_uvloop)
        self._transports: set[asyncio.Transport] = set()
        self._requests = 0
        self._bytes_to_server = 0
        self._bytes_to_client = 0

    def statistics(self) -> RelayStatistics:
        """Requests and bytes relayed so far (read from any thread; ints are atomic)."""
        return RelayStatistics(self._requests, self._bytes_to_server, self._bytes_to_client)

    def reset_statistics(self) -> None:
        """Start counting from zero."""
        self._requests = self._bytes_to_server = self._bytes_to_client = 0

    def inject(self, path_contains: str, *faults: str) -> None:
        """Not supported: a relay does not see requests."""
        raise TypeError("LatencyRelay cannot inject faults; use LoopbackProxy")

    async def _main(self, ready: threading.Event) -> None:
        self._stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _RelayClient(self), "127.0.0.1", 0, backlog=1024)
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        async with server:
            await self._stop.wait()
            server.close()
            for transport in list(self._transports):
                transport.abort()
