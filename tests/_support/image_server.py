"""A loopback HTTP server of generated JPEGs with latency and faults keyed by URL (W7, Ray test).

It runs in its own process (``ImageServer`` starts ``python -m tests._support.image_server``)
so that serving never competes for the client's GIL. Plain asyncio streams on uvloop when it
is installed; HTTP/1.1 with keep-alive, GET only.

``GET /img/<n>.jpg`` answers after ``latency`` seconds (50 ms by default). What it answers
is a pure function of the path (``fate(path)``), so every client, every run and every retry
sees the same thing:

- ``"ok"``: 200 with one of ``pool`` generated JPEGs (``image_of(path)`` picks which);
- ``"slow"`` (1 %): the same 200, its body sent in 4 pieces over ``slow_seconds``;
- ``"missing"`` (0.5 %): 404;
- ``"unavailable"`` (0.5 %): 503, on every attempt;
- ``"reset"`` (0.5 %): the connection is reset (RST) before any byte of the answer;
- ``"stalled"`` (0.5 %): headers and half the body, then nothing for ``stall_seconds``
  (a client's read timeout fires first).

So 2 % of the URLs fail whatever the client does, and the same ones for every client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import socket
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests._support.wire import next_request_head

__all__ = ("FATES", "ImageServer", "fate", "generate_jpegs", "image_of", "url_list")

FATES = ("ok", "slow", "missing", "unavailable", "reset", "stalled")
# Out of 10,000: where each fate starts (ok fills the rest).
_BANDS = (("missing", 50), ("unavailable", 100), ("reset", 150), ("stalled", 200), ("slow", 300))
FAILING_FATES = ("missing", "unavailable", "reset", "stalled")


def fate(path: str) -> str:
    """What the server does with ``path`` (a function of the path alone)."""
    bucket = zlib.crc32(path.encode()) % 10_000
    for name, end in _BANDS:
        if bucket < end:
            return name
    return "ok"


def image_of(path: str, pool: int) -> int:
    """Which of the ``pool`` generated images ``path`` serves."""
    return zlib.crc32(b"image:" + path.encode()) % pool


def url_list(base: str, count: int) -> list[str]:
    """``count`` URLs of the server at ``base`` (``http://127.0.0.1:port``)."""
    return [f"{base}/img/{n:06d}.jpg" for n in range(count)]


def generate_jpegs(pool: int, seed: int = 0, quality: int = 90) -> list[bytes]:
    """``pool`` distinct JPEGs, 320..640 x 288..480 pixels, smooth shapes plus noise."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(pool):
        width, height = int(rng.integers(320, 641)), int(rng.integers(288, 481))
        y, x = np.mgrid[0:height, 0:width].astype(np.float32)
        fx, fy, phase = rng.uniform(0.005, 0.05, 3)
        base = 127 + 100 * np.sin(x * fx + phase) * np.cos(y * fy)
        channels = [base + rng.normal(0, 12, (height, width)) + rng.uniform(-40, 40)]
        channels += [np.roll(channels[0], int(rng.integers(1, 50)), axis=c % 2) for c in (1, 2)]
        pixels = np.clip(np.stack(channels, axis=-1), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels, "RGB").save(buffer, "JPEG", quality=quality)
        out.append(buffer.getvalue())
    return out


@dataclass(frozen=True)
class _Settings:
    latency: float
    slow_seconds: float
    stall_seconds: float


def _head(status: int, reason: str, length: int, content_type: str, close: bool) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {reason}",
        f"Content-Type: {content_type}",
        f"Content-Length: {length}",
        "Connection: close" if close else "Connection: keep-alive",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _answer(
    path: str, close: bool, writer: asyncio.StreamWriter, images: list[bytes], cfg: _Settings
) -> bool:
    """Write the answer to ``path``; False when the connection is gone afterwards."""
    await asyncio.sleep(cfg.latency)
    kind = fate(path) if path.startswith("/img/") else "missing"
    if kind == "reset":
        _reset(writer)
        return False
    if kind in ("missing", "unavailable"):
        status, reason = (404, "Not Found") if kind == "missing" else (503, "Unavailable")
        body = reason.encode()
        writer.write(_head(status, reason, len(body), "text/plain", close) + body)
        await writer.drain()
        return not close
    body = images[image_of(path, len(images))]
    writer.write(_head(200, "OK", len(body), "image/jpeg", close))
    if kind == "stalled":
        writer.write(body[: len(body) // 2])
        await writer.drain()
        await asyncio.sleep(cfg.stall_seconds)
        writer.transport.abort()
        return False
    if kind == "slow":
        step = -(-len(body) // 4)
        for start in range(0, len(body), step):
            writer.write(body[start : start + step])
            await writer.drain()
            await asyncio.sleep(cfg.slow_seconds / 4)
    else:
        writer.write(body)
        await writer.drain()
    return not close


async def _connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    images: list[bytes],
    cfg: _Settings,
) -> None:
    try:
        while True:
            head = await next_request_head(reader)
            if head is None:
                break
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            path = parts[1] if len(parts) == 3 else "/"
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(":") for line in lines[1:] if line)
            }
            close = headers.get("connection", "").lower() == "close" or parts[-1] == "HTTP/1.0"
            if not await _answer(path, close, writer, images, cfg):
                break
    except (ConnectionError, OSError):
        pass
    finally:
        writer.transport.abort() if writer.transport.is_closing() else writer.close()


async def serve(port: int, images: list[bytes], cfg: _Settings) -> None:
    """Serve on 127.0.0.1:``port`` until standard input closes; prints the port first."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _connection(reader, writer, images, cfg)
        except asyncio.CancelledError:  # shutting down with a stalled answer pending
            writer.transport.abort()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # the parent closes stdin to stop us
    server.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--pool", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--slow-seconds", type=float, default=0.3)
    parser.add_argument("--stall-seconds", type=float, default=30.0)
    args = parser.parse_args(argv)
    images = generate_jpegs(args.pool)
    cfg = _Settings(args.latency, args.slow_seconds, args.stall_seconds)
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.port, images, cfg))
    else:
        uvloop.run(serve(args.port, images, cfg))


class ImageServer:
    """The server in a child process, as a context manager; ``base`` is its URL root.

    with ImageServer() as server:
        urls = url_list(server.base, 10_000)
    """

    def __init__(
        self,
        *,
        pool: int = 64,
        latency: float = 0.05,
        slow_seconds: float = 0.3,
        stall_seconds: float = 30.0,
    ) -> None:
        self.pool = pool
        self.args = [
            f"--pool={pool}",
            f"--latency={latency}",
            f"--slow-seconds={slow_seconds}",
            f"--stall-seconds={stall_seconds}",
        ]
        self.process: subprocess.Popen[str] | None = None
        self.base = ""

    def __enter__(self) -> ImageServer:
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests._support.image_server", *self.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=root,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"the image server did not start (it printed {line!r})")
        self.base = f"http://127.0.0.1:{int(line)}"
        return self

    def __exit__(self, *exc: object) -> None:
        process = self.process
        if process is None:
            return
        self.process = None
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def images(self) -> Iterator[bytes]:
        """The served JPEGs, in pool order (generated again here: same seed, same bytes)."""
        yield from generate_jpegs(self.pool)


if __name__ == "__main__":
    main()
