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


def maker(dataset: Any, parts: Callable[[], Any], seed: int, **options: Any) -> Callable[[], Any]:
    """``make()``: ``DataLoader(dataset, *parts(), seed=seed, **options)``, ``parts()`` giving
    each loader its sampler and collator."""
    from aioloader import DataLoader

    return lambda: DataLoader(dataset, *parts(), seed=seed, **options)


class Aioloader(harness.Port):
    """A ``DataLoader`` built by ``make()``, consumed with ``async for`` in one event loop.

    ``measure`` releases each batch and times ``count`` batches after ``warm`` (with
    ``close_timed``, the stream's close too; with ``sync_timed``, through ``batches``: a
    synchronous consumer). ``batches`` collects a stream, or with ``sync`` reads ``iter_sync``.
    """

    group = "aioloader"
    sync = close_timed = sync_timed = False

    def __init__(self, make: Callable[[], Any], uvloop: bool = True, **settings: Any) -> None:
        self.make, self.uvloop = make, uvloop
        for key, value in settings.items():  # name, note, sync, close_timed, sync_timed
            if not hasattr(self, key):
                raise TypeError(f"Aioloader has no setting {key!r}")
            setattr(self, key, value)

    @contextlib.contextmanager
    def batches(self, stop: int) -> Iterator[Iterator[Any]]:
        loader = self.make()
        if self.sync:
            yield loader.iter_sync(0, stop, backend_options={"use_uvloop": self.uvloop})
            return
        collected: list[Any] = []

        async def consume() -> None:
            async with loader.stream(0, stop) as stream:
                collected.extend([batch async for batch in stream])

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
    spec: dict[str, Any], work: Work, collate: Collate, cache: Any = None
) -> tuple[Any, Any]:
    """``(TarShards, DataLoader)`` over the spec's WebDataset tars on S3: a
    ``BlockShuffledSampler(window=spec["window"] or 4)`` if ``spec["sampler"] == "block"``,
    else a ``ShuffledSampler``; a ``cache`` is planned by the loader when a stream starts."""
    import aioloader
    from tests._support.s3 import S3Info

    keys = ("endpoint", "bucket", "access_key_id", "secret_access_key")
    store = S3Info(*(spec[key] for key in keys)).store(max_retries=2)
    options = {} if cache is None else {"cache": cache}
    index_dir, inflight = spec["index_dir"], spec["inflight"]
    shards = aioloader.TarShards(
        spec["keys"], store, index_dir=index_dir, max_concurrency=inflight, **options
    )
    if spec.get("sampler") == "block":
        sizes = [len(index.samples) for index in shards.indices]
        if spec.get("piece"):
            sizes = aioloader.shard_pieces(sizes, spec["piece"])
        window = spec.get("window", 4)
        sampler: Any = aioloader.BlockShuffledSampler(
            sizes, spec["batch"], window=window, drop_last=True
        )
    else:
        sampler = aioloader.ShuffledSampler(len(shards), spec["batch"])
    loader = aioloader.DataLoader(
        shards,
        sampler,
        lambda samples: collate(samples),
        seed=spec["seed"],
        transform=lambda s: work(s["jpg"], s["cls"], s["id"]),
        workers=spec["workers"],
        prefetch=spec.get("prefetch", 8),
        max_inflight_reads=inflight,
    )
    return shards, loader
