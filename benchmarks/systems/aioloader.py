"""aioloader: ``DataLoader`` rows, in memory and over tar shards on S3, and the async runner."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import harness

from systems.s3spec import Collate, Work


def run_async(function: Callable[[], Any], uvloop: bool = True) -> Any:
    """``anyio.run(function)`` on asyncio, with uvloop unless told otherwise."""
    import anyio

    return anyio.run(function, backend="asyncio", backend_options={"use_uvloop": uvloop})


def in_memory(
    samples: list[Any], sampler: Callable[[], Any], collate: Any, seed: int, **options: Any
) -> Callable[[], Any]:
    """A maker of ``DataLoader(MemoryDataset(samples), sampler(), collate, seed=seed,
    **options)``: a fresh loader and sampler per call, over one dataset."""
    from aioloader import DataLoader
    from aioloader.testing import MemoryDataset

    dataset = MemoryDataset(samples)
    return lambda: DataLoader(dataset, sampler(), collate, seed=seed, **options)


class Aioloader(harness.Port):
    """A ``DataLoader`` built by ``make()``, consumed with ``async for`` in one event loop.

    ``measure`` releases each batch (``self.release``) and times ``count`` batches after
    ``warm``; ``close_timed`` also times the stream's close; ``sync_timed`` times
    ``batches`` instead (a synchronous consumer). ``batches`` (the check before timing)
    collects a stream, or with ``sync`` reads ``iter_sync``.
    """

    group = "aioloader"

    def __init__(self, make: Callable[[], Any], uvloop: bool = True, sync: bool = False) -> None:
        self.make, self.uvloop, self.sync = make, uvloop, sync
        self.close_timed = self.sync_timed = False

    @contextlib.contextmanager
    def batches(self, stop: int) -> Iterator[Iterator[Any]]:
        loader = self.make()
        if self.sync:
            yield loader.iter_sync(0, stop, backend_options={"use_uvloop": self.uvloop})
            return
        collected: list[Any] = []

        async def consume() -> None:
            async with loader.stream(0, stop) as stream:
                async for batch in stream:
                    collected.append(batch)

        run_async(consume, self.uvloop)
        yield iter(collected)

    def measure(self, warm: int, count: int) -> float:
        if self.sync_timed:
            return super().measure(warm, count)
        loader = self.make()

        async def consume() -> float:
            seen, started = 0, 0.0
            async with loader.stream(0, warm + count) as stream:
                async for batch in stream:
                    if seen == warm:
                        started = time.perf_counter()
                    self.release(batch)
                    seen += 1
                ended = time.perf_counter()
            if self.close_timed:
                ended = time.perf_counter()
            return count / (ended - started)

        return float(run_async(consume, self.uvloop))


def tar_loader(
    spec: dict[str, Any],
    work: Work,
    collate: Collate,
    cache: Any = None,
) -> tuple[Any, Any]:
    """``(TarShards, DataLoader)`` over the spec's WebDataset tars on S3.

    ``spec["sampler"] == "block"`` picks ``BlockShuffledSampler(window=spec["window"] or 4)``,
    else ``ShuffledSampler``. A ``cache`` is planned by the loader itself when a stream starts.
    """
    import aioloader
    from tests._support.s3 import S3Info

    info = S3Info(
        spec["endpoint"], spec["bucket"], spec["access_key_id"], spec["secret_access_key"]
    )
    options = {} if cache is None else {"cache": cache}
    shards = aioloader.TarShards(
        spec["keys"],
        info.store(max_retries=2),
        index_dir=spec["index_dir"],
        max_concurrency=spec["inflight"],
        **options,
    )
    if spec.get("sampler") == "block":
        sizes = [len(index.samples) for index in shards.indices]
        sampler: Any = aioloader.BlockShuffledSampler(
            sizes, spec["batch"], window=spec.get("window", 4), drop_last=True
        )
    else:
        sampler = aioloader.ShuffledSampler(len(shards), spec["batch"])
    loader = aioloader.DataLoader(
        shards,
        sampler,
        lambda samples, plan: collate(samples),
        seed=spec["seed"],
        transform=lambda s, rng: work(s["jpg"], s["cls"], s["id"]),
        workers=spec["workers"],
        prefetch=spec.get("prefetch", 8),
        max_inflight_reads=spec["inflight"],
    )
    return shards, loader
