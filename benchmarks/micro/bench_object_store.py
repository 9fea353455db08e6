"""Object-store read throughput: ObjectStore against a hand-written aiohttp client and torch.

Run: ``.venv/bin/python benchmarks/micro/bench_object_store.py`` (two to three minutes).
W2 runs the same clients as rows. docs/benchmarks.md (micro-benchmarks) says what it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import functools
import hashlib
import hmac
import json
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, cast
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


@functools.cache
def head(i: int) -> bytes:
    """The first bytes of object ``i``, whose payload is ``default_rng(i).bytes(OBJECT_SIZE)``
    (incompressible: SeaweedFS would gzip a constant fill)."""
    return np.random.default_rng(i).bytes(8)


def decode(data: bytes, index: int) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8)


def check(batch: list[Any], indices: list[int]) -> None:
    for array, i in zip(batch, indices, strict=True):
        if array.shape != (OBJECT_SIZE,) or array[:8].tobytes() != head(i):
            raise AssertionError(f"object {i} came back wrong")


async def upload(info: S3Info, count: int) -> None:
    store, limiter = info.store(), anyio.CapacityLimiter(32)

    async def put(i: int) -> None:
        head(i)  # fill the cache of expected first bytes outside the timed runs
        async with limiter:
            await obstore.put_async(store, key_of(i), np.random.default_rng(i).bytes(OBJECT_SIZE))

    async with anyio.create_task_group() as tg:
        for i in range(count):
            tg.start_soon(put, i)


def run_uvloop(function: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    return anyio.run(function, *args, backend="asyncio", backend_options={"use_uvloop": True})


async def drive(read_batch: Callable[..., Awaitable[list[Any]]], n: int, lanes: int) -> None:
    """Read ``n`` samples in batches of 64, ``lanes`` batches in flight at once."""
    cursor = iter([list(range(i, min(i + BATCH, n))) for i in range(0, n, BATCH)])

    async def lane() -> None:
        for indices in cursor:
            check(await read_batch(indices), indices)

    async with anyio.create_task_group() as tg:
        for _ in range(lanes):
            tg.start_soon(lane)


def lanes_for(inflight: int) -> int:
    """Batches in flight: twice the read budget in batches, as an engine prefetch keeps (the
    client caps reads at ``inflight``; the extra batches queue, keeping the pipe full)."""
    return 2 * max(1, inflight // BATCH)


CPU_PER_SAMPLE: list[float] = [0.0]  # of the last timed() best run, this process only


def timed(run: Callable[[], Any], n: int, repeats: int) -> float:
    """Samples/s of the best of ``repeats`` runs; notes its CPU time per sample."""
    best = float("inf")
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        run()
        elapsed = time.perf_counter() - start
        if elapsed < best:
            best, CPU_PER_SAMPLE[0] = elapsed, (time.process_time() - cpu) / n
    return n / best


def bench_aioloader(
    info: S3Info, endpoint: str, inflight: int, n: int, repeats: int, client_options: dict[str, Any]
) -> float:
    options = {"pool_max_idle_per_host": str(inflight), **client_options}
    store = info.store(endpoint=endpoint, client_options=options)
    keys, retries = [key_of(i) for i in range(n)], RetryPolicy(max_attempts=3)
    source = ObjectStore(
        store, keys, decode=decode, max_concurrency=inflight, timeout=60.0, retries=retries
    )
    lanes = lanes_for(inflight)
    run_uvloop(drive, source.get_samples, min(n, 4 * inflight), lanes)  # warm the pool
    rate = timed(lambda: run_uvloop(drive, source.get_samples, n, lanes), n, repeats)
    if source.statistics().retries:
        print(f"  note: {source.statistics().retries} retries", file=sys.stderr)
    return rate


def bench_loader(info: S3Info, endpoint: str, n: int, repeats: int, **knobs: Any) -> float:
    """One epoch of ``DataLoader(ObjectStore, **knobs)``: hand-set, or ``"auto"`` (issue 21).

    The store's own limit is 256 reads, the largest hand-picked setting, so the loader's
    ``max_inflight_reads`` (tuned where not given) decides.
    """
    from aioloader import DataLoader, SequentialSampler

    store = info.store(endpoint=endpoint, client_options={"pool_max_idle_per_host": "256"})
    keys = [key_of(i) for i in range(n)]
    source = ObjectStore(store, keys, decode=decode, max_concurrency=256, timeout=60.0)

    def collate(samples: list[Any], plan: Any) -> list[Any]:
        check(samples, plan.indices.tolist())
        return samples

    sampler = SequentialSampler(n, BATCH, drop_last=False)
    loader = DataLoader(source, sampler, collate, seed=0, **knobs)

    async def epoch() -> None:
        async with loader.stream(0, loader.steps_per_epoch) as batches:
            async for _ in batches:
                pass

    run_uvloop(epoch)  # warm the connection pool (and, for auto, the tuner: it keeps its knobs)
    return timed(lambda: run_uvloop(epoch), n, repeats)


def signed_get(info: S3Info, host: str, path: str) -> dict[str, str]:
    """The headers of an unsigned-payload GET (path-style S3), AWS Signature V4, hand-written
    (``host`` is signed, and left to aiohttp to send)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"host": host, "x-amz-content-sha256": "UNSIGNED-PAYLOAD", "x-amz-date": stamp}
    signed = ";".join(sorted(headers))
    lines = [f"{k}:{headers[k]}" for k in sorted(headers)]
    canonical = "\n".join(["GET", path, "", *lines, "", signed, "UNSIGNED-PAYLOAD"])
    scope = f"{day}/{info.region}/s3/aws4_request"
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    key = ("AWS4" + info.secret_access_key).encode()
    for part in (day, info.region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{digest}".encode()
    signature = hmac.new(key, to_sign, hashlib.sha256).hexdigest()
    credential = f"Credential={info.access_key_id}/{scope}"
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 {credential}, SignedHeaders={signed}, Signature={signature}"
    )
    del headers["host"]
    return headers


def bench_aiohttp(info: S3Info, endpoint: str, inflight: int, n: int, repeats: int) -> float:
    """aiohttp GETs signed by ``signed_get``, ``inflight`` at once, the same batch driver."""
    import aiohttp
    import uvloop

    host = urlsplit(endpoint).netloc

    async def main(count: int) -> None:
        connector = aiohttp.TCPConnector(limit=inflight, limit_per_host=inflight)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
            semaphore = asyncio.Semaphore(inflight)

            async def one(i: int) -> np.ndarray:
                path = f"/{info.bucket}/{quote(key_of(i), safe='/~')}"
                headers = signed_get(info, host, path)
                async with semaphore, session.get(endpoint + path, headers=headers) as response:
                    response.raise_for_status()
                    return decode(await response.read(), i)

            async def read_batch(indices: list[int]) -> list[Any]:
                return list(await asyncio.gather(*(one(i) for i in indices)))

            await drive(read_batch, count, lanes_for(inflight))

    uvloop.run(main(min(n, 4 * inflight)))
    return timed(lambda: uvloop.run(main(n)), n, repeats)


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


def bench_torch(info: S3Info, endpoint: str, workers: int, n: int, repeats: int) -> float:
    from torch.utils.data import DataLoader

    dataset = BlockingDataset(info, endpoint, n)
    loader: DataLoader[np.ndarray] = DataLoader(
        cast(Any, dataset),
        batch_size=BATCH,
        num_workers=workers,
        collate_fn=list,
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


@contextlib.contextmanager
def serving(n: int, log: Callable[[str], None]) -> Iterator[tuple[S3Info, list[tuple[str, str]]]]:
    """SeaweedFS with ``n`` objects, settled, and the relay: the server's info and the paths
    ``(name, endpoint)``, direct and +20 ms."""
    with SeaweedServer(bucket="bench") as server:
        info, started = server.info, time.perf_counter()
        anyio.run(upload, info, n)
        bench_aiohttp(info, info.endpoint, 256, n, 1)  # settle the server: one untimed pass
        with contextlib.closing(Relay(info.endpoint)) as relay:
            took = time.perf_counter() - started
            log(f"  uploaded {n} x 64 KiB in {took:.1f} s; relay at {relay.endpoint}")
            yield info, [("direct", info.endpoint), ("+20 ms", relay.endpoint)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--client-options", default="{}", help="obstore ClientConfig as JSON")
    parser.add_argument("--skip-torch", action="store_true")
    args = parser.parse_args()
    n, repeats, client_options = args.objects, args.repeats, json.loads(args.client_options)
    rows: list[str] = []
    rates: dict[tuple[str, str, int], float] = {}

    def record(path: str, client: str, inflight: int, rate: float) -> None:
        rates[path, client, inflight] = rate
        bound = inflight / DELAY if path != "direct" else None
        cpu = None if client.endswith(" 2 workers") else CPU_PER_SAMPLE[0]
        cells = [path, client, str(inflight), f"{rate:,.0f}", f"{rate * OBJECT_SIZE / 2**20:,.0f}"]
        cells += [f"{bound:,.0f}", f"{rate / bound:.0%}"] if bound else ["-", "-"]
        cells.append(f"{cpu * 1e6:,.0f}" if cpu is not None else "-")
        rows.append("| " + " | ".join(cells) + " |")
        print(rows[-1], file=sys.stderr)

    with serving(n, functools.partial(print, file=sys.stderr)) as (info, paths):
        for path, endpoint in paths:
            for inflight in (64, 256):
                rate = bench_aioloader(info, endpoint, inflight, n, repeats, client_options)
                record(path, "aioloader ObjectStore", inflight, rate)
                rate = bench_aiohttp(info, endpoint, inflight, n, repeats)
                record(path, "hand-written aiohttp", inflight, rate)
            count = n if path == "direct" else min(n, TORCH_PROXY_OBJECTS)
            for workers in () if args.skip_torch else (0, 2):
                rate = bench_torch(info, endpoint, workers, count, 1)
                record(path, f"torch DataLoader, {workers} workers", max(workers, 1), rate)
    print(f"\n{n} objects x 64 KiB, batches of {BATCH}, np.frombuffer; best of {repeats}\n")
    print(
        "| path | client | reads in flight | samples/s | MiB/s | latency bound | of bound "
        "| client CPU µs/sample |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|", *rows, "", sep="\n")
    for path in ("direct", "+20 ms"):
        ours = rates[path, "aioloader ObjectStore", 256]
        ratio = ours / rates[path, "hand-written aiohttp", 256]
        line = f"{path}: aioloader / aiohttp at 256 in flight = {ratio:.2f}x"
        if torch := rates.get((path, "torch DataLoader, 2 workers", 2)):
            line += f"; aioloader (256) / torch (2 workers) = {ours / torch:.1f}x"
        if path != "direct":
            share = rates[path, "aioloader ObjectStore", 64] / (64 / DELAY)
            line += f"; aioloader at 64 in flight = {share:.0%} of the latency bound"
        print(line)


if __name__ == "__main__":
    main()
