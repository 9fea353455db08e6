"""W2: object storage (SeaweedFS on loopback): its data, the clients read it with, its rows.

The objects (64 KiB, known from their index alone), the batch driver and the three clients:
aioloader's ``ObjectStore`` (and ``DataLoader`` over it), a hand-written aiohttp client
(SigV4-signed GETs, the baseline) and torch's ``DataLoader`` with a blocking obstore GET.
Each row runs once per round, interleaved; ``micro/bench_object_store.py`` runs the same
clients standalone. docs/benchmarks.md (W2) gives the rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import functools
import hashlib
import hmac
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote, urlsplit

import anyio
import harness
import numpy as np
import obstore
from harness import Case
from storage import DELAY, Relay

from aioloader.sources._object_store import ObjectStore, RetryPolicy

NAME = "W2"
TITLE = "object storage: 64 KiB objects from SeaweedFS on loopback, batches of 64"
NOTES = [
    "Ratios: each aioloader row against the hand-written aiohttp row of the same path and "
    "reads in flight (torch against aiohttp at the smaller number in flight). The latency "
    "bound is reads in flight / 20 ms. On a small machine the server, the relay and the "
    "client share the cores, so the direct rows show what the machine can serve at all.",
]

if TYPE_CHECKING:
    from tests._support.s3 import S3Info

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
    from aioloader import DataLoader, SequentialSampler, takes_plan

    store = info.store(endpoint=endpoint, client_options={"pool_max_idle_per_host": "256"})
    keys = [key_of(i) for i in range(n)]
    source = ObjectStore(store, keys, decode=decode, max_concurrency=256, timeout=60.0)

    @takes_plan
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
    from tests._support.s3 import SeaweedServer

    with SeaweedServer(bucket="bench") as server:
        info, started = server.info, time.perf_counter()
        anyio.run(upload, info, n)
        bench_aiohttp(info, info.endpoint, 256, n, 1)  # settle the server: one untimed pass
        with contextlib.closing(Relay(info.endpoint)) as relay:
            took = time.perf_counter() - started
            log(f"  uploaded {n} x 64 KiB in {took:.1f} s; relay at {relay.endpoint}")
            yield info, [("direct", info.endpoint), ("+20 ms", relay.endpoint)]


@dataclasses.dataclass(frozen=True)
class W2Config:
    objects: int = 2048
    inflight: tuple[int, ...] = (64, 256)
    torch_workers: int | None = 2  # None: no torch row


def cases(cfg: W2Config, log: Callable[[str], None], stack: contextlib.ExitStack) -> list[Case]:
    """Start the server and the relay (stopped by ``stack``), upload, build the rows."""
    n = cfg.objects
    info, paths = stack.enter_context(serving(n, log))
    out = []
    for path, endpoint in paths:
        for inflight in cfg.inflight:  # each aioloader row's ratio: aiohttp at the same reads
            theirs = f"hand-written aiohttp, {inflight} in flight"
            facts = {"latency bound": f"{inflight / DELAY:,.0f}/s"} if path != "direct" else {}
            measure = functools.partial(bench_aioloader, info, endpoint, inflight, n, 1, {})
            note = "ObjectStore(max_concurrency=R).get_samples, uvloop"
            system = f"aioloader ObjectStore, {inflight} in flight"
            out.append(_case(path, system, measure, note, theirs, facts=facts))
            measure = functools.partial(bench_aiohttp, info, endpoint, inflight, n, 1)
            note = "aiohttp ClientSession, SigV4 GETs, same batch driver"
            extra = {"group": "hand-written", "baseline": True, "facts": facts}
            out.append(_case(path, theirs, measure, note, theirs, **extra))
        if path == "direct" and cfg.torch_workers is not None:
            workers = cfg.torch_workers
            measure = functools.partial(bench_torch, info, endpoint, workers, n, 1)
            note = "spawned workers, blocking obstore.get in __getitem__"
            theirs = f"hand-written aiohttp, {cfg.inflight[0]} in flight"
            system = f"torch DataLoader, {workers} workers"
            out.append(_case(path, system, measure, note, theirs, group="torch"))
        if path != "direct":  # the loader's own knobs, hand-set and "auto" (issue 21)
            theirs = f"hand-written aiohttp, {cfg.inflight[-1]} in flight"
            hand_set = [(0, lanes_for(reads), reads) for reads in cfg.inflight]
            for workers, prefetch, reads in [*hand_set, ("auto", "auto", None)]:
                knobs = {"workers": workers, "prefetch": prefetch, "max_inflight_reads": reads}
                knobs = {k: v for k, v in knobs.items() if v is not None}
                setting = "auto" if reads is None else f"prefetch {prefetch}, {reads} reads"
                measure = functools.partial(bench_loader, info, endpoint, n, 1, **knobs)
                note = ", ".join(f"{k}={v!r}" for k, v in knobs.items())
                note = f"DataLoader(ObjectStore, {note}), uvloop"
                out.append(_case(path, f"aioloader DataLoader, {setting}", measure, note, theirs))
    return out


def _case(path: str, system: str, measure: Any, note: str, theirs: str, **extra: Any) -> Case:
    """A W2 row in samples/s (group "aioloader" unless ``extra`` says otherwise)."""
    fields = {"group": "aioloader", "note": note, "compare_to": f"{path}: {theirs}", **extra}
    return Case("W2", f"{path}: {system}", "samples/s", measure, **fields)


def targets(found: list[Case]) -> list[dict[str, Any]]:
    """Issue 21: the ``auto`` loader >= 0.95x the best hand-set loader through the relay."""
    rows = [c.system for c in found if c.workload == "W2" and "DataLoader" in c.system]
    if not rows:
        return []
    picked = [name for name in rows if not name.endswith("auto")]
    return [harness.auto_target(found, "W2", "+20 ms: aioloader DataLoader, auto", picked)]


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W2's cases and notes (left out, and said so, without weed, aiohttp or obstore)."""
    cfg = W2Config(objects=128, inflight=(32,), torch_workers=None) if quick else W2Config()
    log("W2: starting SeaweedFS and the 20 ms relay, uploading")
    if not harness.can_run("W2", ("aiohttp", "obstore"), log, True):
        return [], ["Left out: SeaweedFS (`weed`), aiohttp or obstore is missing."]
    return cases(cfg, log, stack), NOTES + ([f"Quick run: {cfg}."] if quick else [])
