"""A tiny HTTP/1.1 proxy on loopback that adds latency or injects faults, for tests.

It forwards requests unchanged (so S3 signatures stay valid) to one upstream server and
relays the responses. Faults are queued per path substring and consumed one request at a
time; each request is logged. It runs on its own thread and event loop, so tests on any
async library (or none) can use it::

    with LoopbackProxy("http://127.0.0.1:8333", delay=0.02) as proxy:
        proxy.inject("bucket/key-7", "503", "reset")  # the next two GETs of key-7 fail
        store = S3Store(..., endpoint=proxy.endpoint)

Faults: an HTTP status code as text (``"503"``, ``"429"``, ``"404"``, ``"403"``...) answers
with that status and an S3 error body; ``"reset"`` aborts the connection with a TCP reset;
``"stall"`` never answers (the client must time out).

``testing_relay.LatencyRelay`` only delays bytes at the TCP level (no parsing, no faults):
much cheaper, for benchmarks. Run as a program, ``python -m aioloader.testing_proxy UPSTREAM
--delay 0.02 [--relay] [--uvloop]`` prints its endpoint on one line and serves until stdin
closes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import socket
import struct
import sys
import threading
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import urlsplit

__all__ = ("LoopbackProxy", "ProxyRecord", "main")

_REASONS = {403: "Forbidden", 404: "Not Found", 429: "Too Many Requests", 500: "Internal"}
_S3_CODES = {403: "AccessDenied", 404: "NoSuchKey", 429: "SlowDown", 503: "SlowDown"}
_CHUNK = 256 * 1024


@dataclass(frozen=True)
class ProxyRecord:
    """One request the proxy saw: method, path, and ``"forwarded"`` or the fault applied."""

    method: str
    path: str
    outcome: str


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return parts[0], parts[1] if len(parts) > 1 else "", headers


async def _relay_body(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, headers: dict[str, str]
) -> None:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = await reader.readuntil(b"\r\n")
            writer.write(size_line)
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:  # trailers, then the empty line
                    line = await reader.readuntil(b"\r\n")
                    writer.write(line)
                    if line == b"\r\n":
                        return
            writer.write(await reader.readexactly(size + 2))
            await writer.drain()
    elif "content-length" in headers:
        left = int(headers["content-length"])
        while left:
            chunk = await reader.read(min(left, _CHUNK))
            if not chunk:
                raise ConnectionError("upstream closed in the middle of a body")
            left -= len(chunk)
            writer.write(chunk)
            await writer.drain()
    else:
        while chunk := await reader.read(_CHUNK):
            writer.write(chunk)
            await writer.drain()


class LoopbackProxy:
    """Forward HTTP from a free loopback port to ``upstream``, adding ``delay`` s per request.

    Args:
        upstream: ``http://host:port`` of the real server.
        delay: Seconds to wait before forwarding each request (simulated latency).
        use_uvloop: Run the proxy's own event loop on uvloop (faster, for benchmarks).
    """

    def __init__(self, upstream: str, *, delay: float = 0.0, use_uvloop: bool = False) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            raise ValueError(f"upstream must be 'http://host:port' but got {upstream!r}")
        if delay < 0:
            raise ValueError(f"delay must be >= 0 but got {delay!r}")
        self._upstream = (parts.hostname, parts.port)
        self.delay = delay
        self._use_uvloop = use_uvloop
        self._lock = threading.Lock()
        self._faults: dict[str, collections.deque[str]] = {}
        self._log: list[ProxyRecord] = []
        self._active = 0
        self.max_active = 0
        """Most requests forwarded at the same time since start (or ``clear()``)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._stop: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT`` of the proxy."""
        if not self.port:
            raise RuntimeError("the proxy is not running: call start() first")
        return f"http://127.0.0.1:{self.port}"

    def inject(self, path_contains: str, *faults: str) -> None:
        """Queue faults for the next requests whose path contains ``path_contains``."""
        for fault in faults:
            if fault not in ("reset", "stall") and not (fault.isdigit() and len(fault) == 3):
                raise ValueError(
                    f"fault must be 'reset', 'stall' or a 3-digit status but got {fault!r}"
                )
        with self._lock:
            self._faults.setdefault(path_contains, collections.deque()).extend(faults)

    def records(self, path_contains: str = "") -> list[ProxyRecord]:
        """The requests seen so far whose path contains ``path_contains``."""
        with self._lock:
            return [r for r in self._log if path_contains in r.path]

    def clear(self) -> None:
        """Forget queued faults and the request log."""
        with self._lock:
            self._faults.clear()
            self._log.clear()
            self.max_active = self._active

    def _take_fault(self, method: str, path: str) -> str:
        with self._lock:
            outcome = "forwarded"
            for needle, queue in self._faults.items():
                if needle in path and queue:
                    outcome = queue.popleft()
                    break
            self._log.append(ProxyRecord(method, path, outcome))
            return outcome

    async def _fault_response(self, writer: asyncio.StreamWriter, status: int, path: str) -> None:
        code = _S3_CODES.get(status, "InternalError")
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>injected by LoopbackProxy</Message><Resource>{path}</Resource></Error>"
        ).encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            f"Content-Type: application/xml\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()

    async def _forward(
        self,
        request: bytes,
        method: str,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        writer: asyncio.StreamWriter,
    ) -> dict[str, str]:
        up_reader, up_writer = upstream
        up_writer.write(request)
        await up_writer.drain()
        response_head = await up_reader.readuntil(b"\r\n\r\n")
        writer.write(response_head)
        _, status_text, response_headers = _parse_head(response_head)
        status = int(status_text)
        if method != "HEAD" and status not in (204, 304) and status >= 200:
            await _relay_body(up_reader, writer, response_headers)
        await writer.drain()
        return response_headers

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                method, path, headers = _parse_head(head)
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                fault = self._take_fault(method, path)
                if fault == "reset":
                    sock = writer.get_extra_info("socket")
                    if sock is not None:
                        sock.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                    writer.transport.abort()
                    return
                if fault == "stall":
                    while await reader.read(_CHUNK):  # until the client gives up
                        pass
                    return
                if fault != "forwarded":
                    await self._fault_response(writer, int(fault), path)
                    continue
                self._active += 1
                self.max_active = max(self.max_active, self._active)
                try:
                    if self.delay:
                        await asyncio.sleep(self.delay)
                    if upstream is None:
                        upstream = await asyncio.open_connection(*self._upstream)
                        self._writers.add(upstream[1])
                    response_headers = await self._forward(head + body, method, upstream, writer)
                finally:
                    self._active -= 1
                if response_headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return
        finally:
            if upstream is not None:
                upstream[1].close()
                self._writers.discard(upstream[1])
            writer.close()
            self._writers.discard(writer)
            if task is not None:
                self._tasks.discard(task)

    async def _main(self, ready: threading.Event) -> None:
        self._stop = asyncio.Event()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        ready.set()
        async with self._server:
            await self._stop.wait()
            self._server.close()
            for open_writer in list(self._writers):  # handlers then end on their own
                open_writer.transport.abort()
            if self._tasks:
                await asyncio.wait(set(self._tasks), timeout=5.0)

    def start(self) -> LoopbackProxy:
        """Start serving on a background thread; returns once the port is bound."""
        if self._thread is not None:
            raise RuntimeError("the proxy is already running")
        ready = threading.Event()
        if self._use_uvloop:
            import uvloop

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        else:
            loop = asyncio.new_event_loop()
        self._loop = loop

        def run() -> None:
            try:
                loop.run_until_complete(self._main(ready))
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="LoopbackProxy", daemon=True)
        self._thread.start()
        if not ready.wait(10.0):
            raise OSError("the proxy did not bind a port within 10 s")
        return self

    def stop(self) -> None:
        """Stop serving and join the thread (idempotent)."""
        thread, self._thread = self._thread, None
        if thread is None or self._loop is None or self._stop is None:
            return
        stop = self._stop
        with contextlib.suppress(RuntimeError):  # the loop already closed
            self._loop.call_soon_threadsafe(stop.set)
        thread.join(10.0)
        self.port = 0

    def __enter__(self) -> LoopbackProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """Serve a latency proxy until stdin closes: prints the endpoint, then blocks."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("upstream", help="http://host:port of the real server")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds added per request")
    parser.add_argument("--uvloop", action="store_true", help="serve on uvloop")
    parser.add_argument("--relay", action="store_true", help="TCP relay (LatencyRelay)")
    args = parser.parse_args(argv)
    kind = LoopbackProxy
    if args.relay:
        from .testing_relay import LatencyRelay

        kind = LatencyRelay
    with kind(args.upstream, delay=args.delay, use_uvloop=args.uvloop) as proxy:
        print(proxy.endpoint, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
