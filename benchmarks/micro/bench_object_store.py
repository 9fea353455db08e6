"""Object-store read throughput: ObjectStore against a hand-written aiohttp client and torch.

Run: ``.venv/bin/python benchmarks/micro/bench_object_store.py`` (two to three minutes).
docs/benchmarks.md (micro-benchmarks) says what it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import hashlib
import hmac
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple, cast
from urllib.parse import quote, urlsplit

import anyio
import numpy as np
import obstore

from aioloader.sources._object_store import ObjectStore, RetryPolicy

REPO_ROOT = Path(__file__).resolve().parents[2]
for _path in (REPO_ROOT, REPO_ROOT / "benchmarks"):  # tests._support (S3 server), the relay
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from storage import DELAY, Relay  # noqa: E402

from tests._support.s3 import S3Info, SeaweedServer  # noqa: E402

OBJECT_SIZE = 64 * 1024
BATCH = 64
TORCH_PROXY_OBJECTS = 512


def key_of(i: int) -> str:
    return f"bench/{i:05d}.bin"


def payload(i: int) -> bytes:
    """Incompressible bytes (SeaweedFS would gzip a constant fill), known from ``i`` alone."""
    return np.random.default_rng(i).bytes(OBJECT_SIZE)


@functools.cache
def head(i: int) -> bytes:
    return np.random.default_rng(i).bytes(8)


def decode(data: bytes, index: int) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8)


def check(batch: list[Any], indices: list[int]) -> None:
    for array, i in zip(batch, indices, strict=True):
        if array.shape != (OBJECT_SIZE,) or array[:8].tobytes() != head(i):
            raise AssertionError(f"object {i} came back wrong")


async def upload(info: S3Info, count: int) -> None:
    store = info.store()
    limiter = anyio.CapacityLimiter(32)

    async def put(i: int) -> None:
        head(i)  # fill the cache of expected first bytes outside the timed runs
        async with limiter:
            await obstore.put_async(store, key_of(i), payload(i))

    async with anyio.create_task_group() as tg:
        for i in range(count):
            tg.start_soon(put, i)


async def drive(
    read_batch: Callable[[list[int]], Awaitable[list[Any]]], n: int, lanes: int
) -> None:
    """Read ``n`` samples in batches of 64, ``lanes`` batches in flight at once."""
    batches = [list(range(i, min(i + BATCH, n))) for i in range(0, n, BATCH)]
    cursor = iter(batches)

    async def lane() -> None:
        for indices in cursor:
            check(await read_batch(indices), indices)

    async with anyio.create_task_group() as tg:
        for _ in range(lanes):
            tg.start_soon(lane)


def lanes_for(inflight: int) -> int:
    """Batches in flight: twice the read budget in batches, as an engine prefetch would keep.

    Reads stay capped at ``inflight`` by the client's limiter; the extra batches only queue,
    so the pipe stays full while a batch waits for its slowest read.
    """
    return 2 * max(1, inflight // BATCH)


CPU_PER_SAMPLE: list[float] = [0.0]  # of the last timed() best run, this process only


def timed(run: Callable[[], None], n: int, repeats: int) -> float:
    """Samples/s of the best of ``repeats`` runs; notes its CPU time per sample."""
    best = float("inf")
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        run()
        elapsed = time.perf_counter() - start
        if elapsed < best:
            best, CPU_PER_SAMPLE[0] = elapsed, (time.process_time() - cpu) / n
    return n / best


# ---------------------------------------------------------------- aioloader


def bench_aioloader(
    info: S3Info, endpoint: str, inflight: int, n: int, repeats: int, client_options: dict[str, Any]
) -> float:
    options = {"pool_max_idle_per_host": str(inflight), **client_options}
    store = info.store(endpoint=endpoint, client_options=options)
    source = ObjectStore(
        store,
        [key_of(i) for i in range(n)],
        decode=decode,
        max_concurrency=inflight,
        timeout=60.0,
        retries=RetryPolicy(max_attempts=3),
    )
    lanes = lanes_for(inflight)

    def run() -> None:
        anyio.run(
            drive,
            source.get_samples,
            n,
            lanes,
            backend="asyncio",
            backend_options={"use_uvloop": True},
        )

    anyio.run(
        drive,
        source.get_samples,
        min(n, 4 * inflight),
        lanes,
        backend="asyncio",
        backend_options={"use_uvloop": True},
    )  # warm the connection pool
    rate = timed(run, n, repeats)
    if source.statistics().retries:
        print(f"  note: {source.statistics().retries} retries", file=sys.stderr)
    return rate


def bench_loader(
    info: S3Info,
    endpoint: str,
    n: int,
    repeats: int,
    workers: int | str,
    prefetch: int | str,
    reads: int | None,
) -> float:
    """One epoch of ``DataLoader(ObjectStore)``: hand-set knobs, or ``"auto"`` (issue 21).

    ``reads`` caps the loader's reads in flight (None with ``prefetch="auto"``: tuned). The
    store's own limit is 256, the largest hand-picked setting, so the loader's knob decides.
    """
    from aioloader import DataLoader, SequentialSampler

    store = info.store(endpoint=endpoint, client_options={"pool_max_idle_per_host": "256"})
    keys = [key_of(i) for i in range(n)]
    options = {} if reads is None else {"max_inflight_reads": reads}

    def collate(samples: list[Any], plan: Any) -> list[Any]:
        check(samples, plan.indices.tolist())
        return samples

    loader = DataLoader(
        ObjectStore(store, keys, decode=decode, max_concurrency=256, timeout=60.0),
        SequentialSampler(n, BATCH, drop_last=False),
        collate,
        seed=0,
        workers=workers,
        prefetch=prefetch,
        **options,
    )

    async def epoch() -> None:
        async with loader.stream(0, loader.steps_per_epoch) as batches:
            async for _ in batches:
                pass

    def run() -> None:
        anyio.run(epoch, backend="asyncio", backend_options={"use_uvloop": True})

    run()  # warm the connection pool (and, for auto, the tuner: it carries its knobs)
    return timed(run, n, repeats)


# ---------------------------------------------------------------- aiohttp


class SigV4:
    """Minimal AWS Signature V4 for unsigned-payload GETs (path-style S3)."""

    def __init__(self, info: S3Info, endpoint: str) -> None:
        self.info = info
        self.endpoint = endpoint.rstrip("/")
        self.host = urlsplit(endpoint).netloc

    def _key(self, day: str) -> bytes:
        key = ("AWS4" + self.info.secret_access_key).encode()
        for part in (day, self.info.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        return key

    def get(self, key: str) -> tuple[str, dict[str, str]]:
        now = datetime.datetime.now(datetime.timezone.utc)
        stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        path = f"/{self.info.bucket}/{quote(key, safe='/~')}"
        headers = {
            "host": self.host,
            "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
            "x-amz-date": stamp,
        }
        signed = ";".join(sorted(headers))
        canonical = "\n".join(
            [
                "GET",
                path,
                "",
                *(f"{k}:{headers[k]}" for k in sorted(headers)),
                "",
                signed,
                "UNSIGNED-PAYLOAD",
            ]
        )
        scope = f"{day}/{self.info.region}/s3/aws4_request"
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        signature = hmac.new(self._key(day), to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={self.info.access_key_id}/{scope}, "
            f"SignedHeaders={signed}, Signature={signature}"
        )
        del headers["host"]
        return self.endpoint + path, headers


def bench_aiohttp(info: S3Info, endpoint: str, inflight: int, n: int, repeats: int) -> float:
    import aiohttp
    import uvloop

    signer = SigV4(info, endpoint)

    async def main(count: int) -> None:
        connector = aiohttp.TCPConnector(limit=inflight, limit_per_host=inflight)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
            semaphore = asyncio.Semaphore(inflight)

            async def one(i: int) -> np.ndarray:
                url, headers = signer.get(key_of(i))
                async with semaphore, session.get(url, headers=headers) as response:
                    response.raise_for_status()
                    return decode(await response.read(), i)

            async def read_batch(indices: list[int]) -> list[Any]:
                return list(await asyncio.gather(*(one(i) for i in indices)))

            await drive(read_batch, count, lanes_for(inflight))

    uvloop.run(main(min(n, 4 * inflight)))
    return timed(lambda: uvloop.run(main(n)), n, repeats)


# ---------------------------------------------------------------- torch


class BlockingDataset:
    """A map-style dataset whose ``__getitem__`` is a blocking obstore GET."""

    def __init__(self, info: S3Info, endpoint: str, n: int) -> None:
        self.info, self.endpoint, self.n = info, endpoint, n
        self.store: Any = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        if self.store is None:  # built in the worker process
            self.store = self.info.store(endpoint=self.endpoint)
        return decode(bytes(obstore.get(self.store, key_of(i)).bytes()), i)


def as_list(batch: list[np.ndarray]) -> list[np.ndarray]:
    return batch


def bench_torch(info: S3Info, endpoint: str, workers: int, n: int, repeats: int) -> float:
    from torch.utils.data import DataLoader

    dataset = BlockingDataset(info, endpoint, n)
    loader: DataLoader[np.ndarray] = DataLoader(
        cast(Any, dataset),
        batch_size=BATCH,
        num_workers=workers,
        collate_fn=as_list,
        multiprocessing_context="spawn" if workers else None,
        persistent_workers=bool(workers),
    )

    def run() -> None:
        for number, batch in enumerate(loader):
            check(batch, list(range(number * BATCH, number * BATCH + len(batch))))

    dataset.n = BATCH * max(1, workers)  # warm-up: a short full epoch starts the workers
    run()  # (breaking out of an epoch would leave stale batches queued in the workers)
    dataset.n = n
    return timed(run, n, repeats)


# ---------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--client-options", default="{}", help="obstore ClientConfig as JSON")
    parser.add_argument("--skip-torch", action="store_true")
    args = parser.parse_args()
    n, repeats = args.objects, args.repeats
    client_options = json.loads(args.client_options)
    rows: list[Row] = []

    def record(path: str, client: str, inflight: int, rate: float, delayed: bool) -> None:
        cpu = None if client.endswith(" 2 workers") else CPU_PER_SAMPLE[0]
        rows.append(Row(path, client, inflight, rate, inflight / DELAY if delayed else None, cpu))
        print(rows[-1], file=sys.stderr)

    with SeaweedServer(bucket="bench") as server:
        info = server.info
        started = time.perf_counter()
        anyio.run(upload, info, n)
        print(f"uploaded {n} x 64 KiB in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        bench_aiohttp(info, info.endpoint, 256, n, 1)  # settle the server: one untimed pass
        relay = Relay(info.endpoint)
        try:
            for path, endpoint in (("direct", info.endpoint), ("+20 ms", relay.endpoint)):
                delayed = endpoint != info.endpoint
                for inflight in (64, 256):
                    rate = bench_aioloader(info, endpoint, inflight, n, repeats, client_options)
                    record(path, "aioloader ObjectStore", inflight, rate, delayed)
                    rate = bench_aiohttp(info, endpoint, inflight, n, repeats)
                    record(path, "hand-written aiohttp", inflight, rate, delayed)
                if not args.skip_torch:
                    count = min(n, TORCH_PROXY_OBJECTS) if delayed else n
                    for workers in (0, 2):
                        rate = bench_torch(info, endpoint, workers, count, 1)
                        label = f"torch DataLoader, {workers} workers"
                        record(path, label, max(workers, 1), rate, delayed)
        finally:
            relay.close()
    print_report(rows, n, repeats)


class Row(NamedTuple):
    path: str
    client: str
    inflight: int
    rate: float
    bound: float | None
    cpu: float | None


def print_report(rows: list[Row], n: int, repeats: int) -> None:
    print(f"\n{n} objects x 64 KiB, batches of {BATCH}, np.frombuffer; best of {repeats}\n")
    print(
        "| path | client | reads in flight | samples/s | MiB/s | latency bound | of bound "
        "| client CPU µs/sample |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        cells = [
            row.path,
            row.client,
            str(row.inflight),
            f"{row.rate:,.0f}",
            f"{row.rate * OBJECT_SIZE / 2**20:,.0f}",
            f"{row.bound:,.0f}" if row.bound else "-",
            f"{row.rate / row.bound:.0%}" if row.bound else "-",
            f"{row.cpu * 1e6:,.0f}" if row.cpu is not None else "-",
        ]
        print("| " + " | ".join(cells) + " |")
    table = {(r.path, r.client, r.inflight): r.rate for r in rows}
    print()
    for path in ("direct", "+20 ms"):
        ours64 = table[(path, "aioloader ObjectStore", 64)]
        ours256 = table[(path, "aioloader ObjectStore", 256)]
        theirs256 = table[(path, "hand-written aiohttp", 256)]
        line = f"{path}: aioloader / aiohttp at 256 in flight = {ours256 / theirs256:.2f}x"
        torch2 = table.get((path, "torch DataLoader, 2 workers", 2))
        if torch2:
            line += f"; aioloader (256) / torch (2 workers) = {ours256 / torch2:.1f}x"
        if path != "direct":
            line += (
                f"; aioloader at 64 in flight = {ours64 / (64 / DELAY):.0%} of the latency bound"
            )
        print(line)


if __name__ == "__main__":
    main()
