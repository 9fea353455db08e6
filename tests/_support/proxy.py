"""A tiny HTTP/1.1 proxy on loopback that adds latency or injects faults, for tests.

It forwards requests unchanged (so S3 signatures stay valid) to one upstream server and
relays the responses. Faults come from three places, checked in this order: faults queued
per path substring and consumed one request at a time (``inject``); a fault applied to every
request of a path substring (``inject_always``); and a seeded random schedule (``schedule``)
that fails a fraction of requests, decided by a hash of ``(seed, method, path, n)`` where
``n`` counts the requests seen for that method and path, so the same reads get the same
faults on every run, whatever the order the requests arrive in. Each request is logged. It
runs on its own thread and event loop, so tests on any async library (or none) can use it::

    with LoopbackProxy("http://127.0.0.1:8333", delay=0.02) as proxy:
        proxy.inject("bucket/key-7", "503", "reset")  # the next two GETs of key-7 fail
        proxy.schedule(0.1, seed=3)  # then 10% of requests fail, reproducibly
        store = S3Store(..., endpoint=proxy.endpoint)

Faults: an HTTP status code as text (``"503"``, ``"429"``, ``"404"``, ``"403"``...) answers
with that status and an S3 error body; ``"reset"`` aborts the connection with a TCP reset;
``"stall"`` never answers (the client must time out); ``"truncate"`` forwards the request
but relays only the first half of the response body (its head still announces the whole
``Content-Length``), then closes the connection; a response without a body is cut before its
head.

``relay.LatencyRelay`` only delays bytes at the TCP level (no parsing, no faults):
much cheaper, for benchmarks. Run as a program, ``python -m tests._support.proxy UPSTREAM
--delay 0.02 [--relay] [--uvloop]`` prints its endpoint on one line and serves until stdin
closes; with ``--relay`` a line ``stats`` on stdin prints the relay's counters as one JSON line
and ``reset`` zeroes them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import hashlib
import json
import socket
import struct
import sys
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

from tests._support.lifecycle import StartedWith
from tests._support.wire import next_request_head

__all__ = ("SCHEDULED_FAULTS", "LoopbackProxy", "ProxyRecord", "main", "scheduled_fault")

_REASONS = {403: "Forbidden", 404: "Not Found", 429: "Too Many Requests", 500: "Internal"}
_S3_CODES = {403: "AccessDenied", 404: "NoSuchKey", 429: "SlowDown", 503: "SlowDown"}
_CHUNK = 256 * 1024
_NAMED_FAULTS = ("reset", "stall", "truncate")
SCHEDULED_FAULTS = ("reset", "503", "429", "stall", "truncate")
"""The faults ``LoopbackProxy.schedule`` draws from by default."""


def _check_fault(fault: str) -> None:
    if fault not in _NAMED_FAULTS and not (fault.isdigit() and len(fault) == 3):
        raise ValueError(
            f"fault must be 'reset', 'stall', 'truncate' or a 3-digit status but got {fault!r}"
        )


def scheduled_fault(
    seed: int, rate: float, faults: tuple[str, ...], method: str, path: str, n: int
) -> str:
    """The fault the schedule gives request ``n`` (0-based) of ``method path``, or ``"forwarded"``.

    A pure function of its arguments: the same seed fails the same requests on every run.
    """
    text = f"{seed}\x00{method}\x00{path}\x00{n}".encode("utf-8", "surrogateescape")
    digest = hashlib.blake2b(text, digest_size=16).digest()
    if int.from_bytes(digest[:8], "big") * 2.0**-64 >= rate:
        return "forwarded"
    return faults[int.from_bytes(digest[8:], "big") % len(faults)]


@dataclass(frozen=True)
class ProxyRecord:
    """One request the proxy saw: method, path, and ``"forwarded"`` or the fault applied.

    A truncated response is logged as ``"truncate"``: forwarded, but cut short.
    """

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


class _TruncatedError(Exception):
    """The proxy cut a response short on purpose: close the connection."""


async def _relay_truncated(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, headers: dict[str, str]
) -> None:
    """Send ``head`` and half of a body of ``Content-Length`` bytes (nothing of others)."""
    length = int(headers.get("content-length", "0") or "0")
    if length < 1 and "chunked" not in headers.get("transfer-encoding", "").lower():
        raise _TruncatedError  # nothing to cut short: close before the head instead
    writer.write(head)
    left = length // 2
    while left > 0:
        chunk = await reader.read(min(left, _CHUNK))
        if not chunk:
            break
        left -= len(chunk)
        writer.write(chunk)
    await writer.drain()
    raise _TruncatedError


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


class LoopbackProxy(StartedWith):
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
        self._always: dict[str, str] = {}
        self._schedule: tuple[float, int, tuple[str, ...], str] | None = None
        self._seen: collections.Counter[tuple[str, str]] = collections.Counter()
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
            _check_fault(fault)
        if faults:
            with self._lock:
                self._faults.setdefault(path_contains, collections.deque()).extend(faults)

    def inject_always(self, path_contains: str, fault: str) -> None:
        """Apply ``fault`` to every request whose path contains ``path_contains`` (until clear)."""
        self.inject(path_contains)  # a subclass that cannot inject faults refuses here
        _check_fault(fault)
        with self._lock:
            self._always[path_contains] = fault

    def schedule(
        self,
        rate: float,
        *,
        seed: int,
        faults: tuple[str, ...] = SCHEDULED_FAULTS,
        path_contains: str = "",
    ) -> None:
        """Fail a fraction ``rate`` of the requests whose path contains ``path_contains``.

        Request ``n`` of a method and path fails with ``scheduled_fault(seed, rate, faults,
        method, path, n)``: reproducible, and independent of the order requests arrive in.
        Replaces any previous schedule; ``clear()`` ends it.
        """
        self.inject(path_contains)  # a subclass that cannot inject faults refuses here
        if not (isinstance(rate, (int, float)) and 0 <= rate <= 1):
            raise ValueError(f"rate must be in [0, 1] but got {rate!r}")
        if not faults:
            raise ValueError("faults must name at least one fault but got ()")
        for fault in faults:
            _check_fault(fault)
        with self._lock:
            self._schedule = (float(rate), int(seed), tuple(faults), path_contains)

    def records(self, path_contains: str = "") -> list[ProxyRecord]:
        """The requests seen so far whose path contains ``path_contains``."""
        with self._lock:
            return [r for r in self._log if path_contains in r.path]

    def fault_counts(self, path_contains: str = "") -> dict[str, int]:
        """How many requests (whose path contains ``path_contains``) got each outcome."""
        return dict(collections.Counter(r.outcome for r in self.records(path_contains)))

    def clear(self) -> None:
        """Forget queued, permanent and scheduled faults and the request log."""
        with self._lock:
            self._faults.clear()
            self._always.clear()
            self._schedule = None
            self._seen.clear()
            self._log.clear()
            self.max_active = self._active

    def _take_fault(self, method: str, path: str) -> str:
        with self._lock:
            n = self._seen[method, path]
            self._seen[method, path] = n + 1
            outcome = "forwarded"
            for needle, queue in self._faults.items():
                if needle in path and queue:
                    outcome = queue.popleft()
                    break
            else:
                for needle, fault in self._always.items():
                    if needle in path:
                        outcome = fault
                        break
                else:
                    if self._schedule is not None and self._schedule[3] in path:
                        rate, seed, faults, _ = self._schedule
                        outcome = scheduled_fault(seed, rate, faults, method, path, n)
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
        truncate: bool = False,
    ) -> dict[str, str]:
        up_reader, up_writer = upstream
        up_writer.write(request)
        await up_writer.drain()
        response_head = await up_reader.readuntil(b"\r\n\r\n")
        _, status_text, response_headers = _parse_head(response_head)
        if truncate:  # a HEAD answer has no body to cut: it is cut before its head
            body_headers = response_headers if method != "HEAD" else {}
            await _relay_truncated(up_reader, writer, response_head, body_headers)
        writer.write(response_head)
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
                head = await next_request_head(reader)
                if head is None:
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
                if fault not in ("forwarded", "truncate"):
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
                    response_headers = await self._forward(
                        head + body, method, upstream, writer, fault == "truncate"
                    )
                finally:
                    self._active -= 1
                if response_headers.get("connection", "").lower() == "close":
                    return
        except (
            ConnectionError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            _TruncatedError,
        ):
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
        from .relay import LatencyRelay

        kind = LatencyRelay
    with kind(args.upstream, delay=args.delay, use_uvloop=args.uvloop) as proxy:
        print(proxy.endpoint, flush=True)
        for line in sys.stdin:
            command = line.strip()
            statistics = getattr(proxy, "statistics", None)
            if command == "stats" and statistics is not None:
                print(json.dumps(dataclasses.asdict(statistics())), flush=True)
            elif command == "reset" and statistics is not None:
                proxy.reset_statistics()  # type: ignore[attr-defined]
                print("{}", flush=True)


if __name__ == "__main__":
    main()
