"""An HTTP/1.1 server on loopback serving generated JPEGs and scripted faults, for tests.

Behaviour is keyed by the URL path, so a test knows what each URL will do without any
timing. Counted behaviours count requests per exact path (so ``/flaky/2/a`` and
``/flaky/2/b`` are independent).

- ``/img/{n}.jpg``: a generated JPEG (one of 32 base images chosen by ``n``; the same bytes
  every time), ``image/jpeg``.
- ``/status/{code}/{name}``: that status, always.
- ``/retry-after/{k}/{seconds}/{name}``: 503 with ``Retry-After: seconds`` for the first
  ``k`` requests, then the image ``name``. ``/429/{k}/{name}`` does the same with 429.
- ``/flaky/{k}/{name}``: the first ``k`` requests are reset (TCP RST), then the image.
- ``/reset/{name}``: always reset.
- ``/slow/{name}``: headers and half the body, then nothing (clients must time out).
- ``/big/{size}/{name}``: ``size`` bytes with a ``Content-Length``;
  ``/chunked/{size}/{name}``: the same without one (chunked encoding).
- ``/redirect/{k}/{name}``: ``k`` redirects (302) down to the image.
- ``/goto?{url}``: a redirect (302) to ``url`` (percent-decoded), any scheme or host.
- ``/trickle/{ms}/{name}``: headers and a ``Content-Length`` of 4096, then one byte every
  ``ms`` milliseconds (the server's own timer) until the client leaves.
- ``/text/{name}``: ``text/plain``.  ``/broken/{name}``: ``image/jpeg`` that is not one.

Options: ``latency`` (seconds added before every response, as a slow network would) and
``error_rate`` with ``seed``: that fraction of ``/img/`` paths (chosen by a hash of seed and
path, the same on every run) fail every time with one of ``SCHEDULED_FAULTS``.

It runs on its own thread and event loop, so tests on any async library can use it::

    with HttpTestServer() as server:
        url = server.url("/img/7.jpg")

Run as a program, ``python -m tests._support.http_server [--latency S] [--error-rate F]``
prints its base URL on one line and serves until standard input closes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import io
import socket
import struct
import sys
import threading
import urllib.parse
from collections import Counter

from tests._support.lifecycle import StartedWith
from tests._support.wire import next_request_head

__all__ = ("SCHEDULED_FAULTS", "HttpTestServer", "jpeg_bytes", "scheduled_fault")

SCHEDULED_FAULTS = ("404", "503", "reset", "slow")
_BASES = 32
_REASONS = {200: "OK", 302: "Found", 404: "Not Found", 429: "Too Many Requests"}
_IMAGE_CACHE: dict[tuple[int, int, int], bytes] = {}
_CACHE_LOCK = threading.Lock()


def jpeg_bytes(n: int, width: int = 96, height: int = 64) -> bytes:
    """The JPEG served for image ``n`` (one of 32 generated images; same bytes every time)."""
    base = n % _BASES
    key = (base, width, height)
    with _CACHE_LOCK:
        cached = _IMAGE_CACHE.get(key)
    if cached is not None:
        return cached
    import numpy as np
    from PIL import Image

    w = max(8, width - 2 * base)
    h = max(8, height - base)
    y, x = np.mgrid[0:h, 0:w]
    pixels = np.stack(
        [(x * 255 // w + base * 7) % 256, (y * 255 // h) % 256, (x + y + base * 13) % 256],
        axis=-1,
    ).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, "JPEG", quality=90)
    data = out.getvalue()
    with _CACHE_LOCK:
        _IMAGE_CACHE[key] = data
    return data


def scheduled_fault(seed: int, path: str, rate: float) -> str | None:
    """The fault a path gets under ``error_rate=rate`` (None for most), the same every run."""
    digest = hashlib.sha256(f"{seed}:{path}".encode()).digest()
    draw = int.from_bytes(digest[:8], "big") / 2**64
    if draw >= rate:
        return None
    return SCHEDULED_FAULTS[digest[8] % len(SCHEDULED_FAULTS)]


def _image_number(name: str) -> int:
    stem = name.rsplit("/", 1)[-1].split(".", 1)[0]
    return int(stem) if stem.isdigit() else int(hashlib.sha256(stem.encode()).hexdigest(), 16)


class HttpTestServer(StartedWith):
    """Serves the paths described in the module docstring on ``127.0.0.1``.

    Args:
        latency: Seconds added before every response.
        error_rate: Fraction of ``/img/`` paths that always fail (see ``scheduled_fault``).
        seed: Seed of that choice.
        image_size: ``(width, height)`` of the largest generated image.
    """

    def __init__(
        self,
        *,
        latency: float = 0.0,
        error_rate: float = 0.0,
        seed: int = 0,
        image_size: tuple[int, int] = (96, 64),
    ) -> None:
        self.latency = latency
        self.error_rate = error_rate
        self.seed = seed
        self.image_size = image_size
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._port = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def base(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self._port}"

    def url(self, path: str) -> str:
        """The full URL of ``path``."""
        return self.base + path

    def count(self, path: str) -> int:
        """Requests seen for ``path``."""
        with self._lock:
            return self.requests[path]

    def _next(self, path: str) -> int:
        with self._lock:
            self.requests[path] += 1
            return self.requests[path]

    async def _respond(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
    ) -> None:
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
        fields = {"content-length": str(len(body)), "content-type": "text/plain"}
        fields.update(headers or {})
        head += [f"{name}: {value}" for name, value in fields.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()

    async def _image(self, writer: asyncio.StreamWriter, name: str) -> None:
        data = jpeg_bytes(_image_number(name), *self.image_size)
        await self._respond(writer, 200, data, {"content-type": "image/jpeg"})

    @staticmethod
    def _reset(writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async def _slow(self, writer: asyncio.StreamWriter) -> None:
        body = jpeg_bytes(0, *self.image_size)
        head = f"HTTP/1.1 200 OK\r\ncontent-type: image/jpeg\r\ncontent-length: {len(body)}\r\n\r\n"
        writer.write(head.encode() + body[: len(body) // 2])
        await writer.drain()
        await asyncio.Event().wait()  # until the client gives up or the server stops

    async def _handle(self, writer: asyncio.StreamWriter, path: str) -> bool:
        """Answer one request; False when the connection is gone (reset)."""
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer(writer, path)
        finally:
            self.in_flight -= 1

    async def _trickle(self, writer: asyncio.StreamWriter, interval: float) -> None:
        head = "HTTP/1.1 200 OK\r\ncontent-type: image/jpeg\r\ncontent-length: 4096\r\n\r\n"
        writer.write(head.encode())
        for _ in range(4096):
            writer.write(b"\xff")
            await writer.drain()
            await asyncio.sleep(interval)

    async def _answer(self, writer: asyncio.StreamWriter, path: str) -> bool:
        if path.startswith("/goto?"):
            self._next(path)
            target = urllib.parse.unquote(path.split("?", 1)[1])
            await self._respond(writer, 302, b"", {"location": target})
            return True
        parts = path.split("?", 1)[0].strip("/").split("/")
        kind, args = parts[0], parts[1:]
        count = self._next(path)
        if self.latency:
            await asyncio.sleep(self.latency)
        if kind == "img":
            fault = scheduled_fault(self.seed, path, self.error_rate) if self.error_rate else None
            if fault == "reset":
                self._reset(writer)
                return False
            if fault == "slow":
                await self._slow(writer)
            if fault is not None:
                await self._respond(writer, int(fault), b"scheduled fault")
                return True
            await self._image(writer, "/".join(args))
        elif kind == "status":
            await self._respond(writer, int(args[0]), b"status " + args[0].encode())
        elif kind in ("retry-after", "429"):
            limit = int(args[0])
            if count <= limit:
                status = 503 if kind == "retry-after" else 429
                after = args[1] if kind == "retry-after" else "0"
                await self._respond(writer, status, b"busy", {"retry-after": after})
            else:
                await self._image(writer, args[-1])
        elif kind == "flaky":
            if count <= int(args[0]):
                self._reset(writer)
                return False
            await self._image(writer, args[-1])
        elif kind == "reset":
            self._reset(writer)
            return False
        elif kind == "slow":
            await self._slow(writer)
        elif kind == "big":
            await self._respond(writer, 200, bytes(int(args[0])), {"content-type": "image/jpeg"})
        elif kind == "chunked":
            await self._chunked(writer, int(args[0]))
        elif kind == "redirect":
            left = int(args[0])
            target = f"/redirect/{left - 1}/{args[1]}" if left > 1 else f"/img/{args[1]}"
            await self._respond(writer, 302, b"", {"location": target})
        elif kind == "trickle":
            await self._trickle(writer, int(args[0]) / 1000)
            return False
        elif kind == "text":
            await self._respond(writer, 200, b"hello", {"content-type": "text/plain"})
        elif kind == "broken":
            await self._respond(writer, 200, b"\xff\xd8not a jpeg", {"content-type": "image/jpeg"})
        else:
            await self._respond(writer, 404, b"unknown path")
        return True

    async def _chunked(self, writer: asyncio.StreamWriter, size: int) -> None:
        head = "HTTP/1.1 200 OK\r\ncontent-type: image/jpeg\r\ntransfer-encoding: chunked\r\n\r\n"
        writer.write(head.encode())
        left = size
        while left > 0:
            piece = min(left, 64 * 1024)
            writer.write(f"{piece:x}\r\n".encode() + bytes(piece) + b"\r\n")
            await writer.drain()
            left -= piece
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                head = await next_request_head(reader)
                if head is None:
                    return
                request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
                parts = request_line.split(" ")
                if len(parts) < 2:
                    return
                if not await self._handle(writer, parts[1]):
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _main(self, ready: threading.Event) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=1024)
        self._port = self._server.sockets[0].getsockname()[1]
        ready.set()
        async with self._server:
            await self._server.serve_forever()

    def start(self) -> HttpTestServer:
        """Start serving on a free port (returns once it listens)."""
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        loop = self._loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(self._main(ready))
            loop.close()

        self._thread = threading.Thread(target=run, name="http-test-server", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        """Stop serving and join the thread (idempotent)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = self._thread = None

        def shutdown() -> None:
            for task in list(self._tasks):
                task.cancel()
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()

        loop.call_soon_threadsafe(shutdown)
        thread.join(10)


def main(argv: list[str] | None = None) -> None:
    """Serve until standard input closes; print the base URL first."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--error-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--image-size", type=int, nargs=2, default=(96, 64))
    args = parser.parse_args(argv)
    with HttpTestServer(
        latency=args.latency,
        error_rate=args.error_rate,
        seed=args.seed,
        image_size=tuple(args.image_size),
    ) as server:
        print(server.base, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
