"""The object-storage rig of W2, W6 and W8: SeaweedFS on loopback, the +20 ms relay, uploads."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DELAY = 0.020


def missing(modules: tuple[str, ...]) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


class Relay:
    """``tests._support.proxy --relay`` (uvloop) in its own process, delaying every request by
    ``delay``; ``counters()``: its requests and bytes so far, asked over its stdin."""

    def __init__(self, upstream: str, delay: float = DELAY) -> None:
        command = [sys.executable, "-m", "tests._support.proxy", upstream, "--delay", str(delay)]
        pipe = subprocess.PIPE
        self.process = subprocess.Popen(
            [*command, "--uvloop", "--relay"], cwd=ROOT, stdin=pipe, stdout=pipe, text=True
        )
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        self.endpoint = self.stdout.readline().strip()
        if not self.endpoint.startswith("http://127.0.0.1:"):
            self.process.kill()
            raise RuntimeError(f"the latency relay did not start (said {self.endpoint!r})")

    def counters(self) -> dict[str, int]:
        self.stdin.write("stats\n")
        self.stdin.flush()
        return dict(json.loads(self.stdout.readline()))

    def close(self) -> None:
        self.stdin.close()
        self.process.wait(10)
        self.stdout.close()


def upload(store: Any, folder: Path, prefix: str) -> list[str]:
    """Put every file under ``folder`` at ``prefix/relative path``; returns the keys."""
    import obstore

    keys = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != ".done"):
        key = f"{prefix}/{path.relative_to(folder).as_posix()}"
        obstore.put(store, key, path.read_bytes())
        keys.append(key)
    return keys


@dataclasses.dataclass
class Rig:
    """A running server with the data uploaded, the tars' index saved, the relay in front."""

    info: Any
    keys: list[str]  # the tar shards' keys
    index_dir: str  # their saved TarShards index
    relay: Relay
    weed_pid: int
    store: Any = None
    index_root: str = ""  # where ``add_tars`` saves each set's index

    def spec(self, endpoint: str) -> dict[str, Any]:
        """What a row's spec needs to reach the bucket at ``endpoint``."""
        names = ("bucket", "access_key_id", "secret_access_key", "region")
        return {**{name: getattr(self.info, name) for name in names}, "endpoint": endpoint}

    def add_tars(self, prefix: str, folder: Path) -> tuple[list[str], str]:
        """Upload the tars of ``folder`` under ``prefix`` and save their ``TarShards`` index
        (directly, not through the relay); returns their keys and the index folder."""
        import aioloader

        keys = upload(self.store, folder, prefix)
        index_dir = str(Path(self.index_root) / prefix)
        aioloader.TarShards(keys, self.store, index_dir=index_dir)
        return keys, index_dir


def start(
    stack: contextlib.ExitStack, bucket: str, tars: tuple[str, Path], others: dict[str, Path]
) -> Rig:
    """SeaweedFS with ``tars`` (prefix, folder) and ``others`` uploaded, the tars' index built
    into a temporary folder, and the relay; ``stack`` stops and removes them all. More sets
    of tars: ``Rig.add_tars``."""
    from tests._support.s3 import SeaweedServer

    server = stack.enter_context(SeaweedServer(bucket=bucket))
    store = server.info.store(max_retries=2)
    for prefix, folder in others.items():
        upload(store, folder, prefix)
    index_root = tempfile.mkdtemp(prefix=f"aioloader-{bucket}-index-")
    stack.callback(shutil.rmtree, index_root, ignore_errors=True)
    relay = Relay(server.info.endpoint)
    stack.callback(relay.close)
    assert server._process is not None
    rig = Rig(server.info, [], "", relay, server._process.pid, store, index_root)
    rig.keys, rig.index_dir = rig.add_tars(*tars)
    return rig
