"""W6's systems, each run in a fresh child process: one cold epoch, then a resume at 75%.

``python benchmarks/workloads/w6_systems.py SPEC_JSON`` runs one row once. Each system gets a fresh
process so that no state leaks between rows (Mosaic's shared memory, an obstore runtime
started before a fork, imported modules). The child talks to its parent on stdout:
``MARK start`` (before the loader is built) and ``MARK epoch`` (after the epoch), each
answered by a line on stdin once the parent has read the relay's counters and the S3
server's CPU time, then ``RESULT {json}``. Logs go to stderr.

Every system runs ``w6_data.preprocess`` on each JPEG (Pillow decode, resize 224x224,
normalise, CHW float32) and ``w6_data.collate`` on each batch of 64; every loader shuffles.

- WebDataset: ``WebDataset(presigned http URLs, shardshuffle, split_by_worker)
  .shuffle(1000).map(...).batched(64)`` in a torch DataLoader (``batch_size=None``). It
  has no resume: the resume row rebuilds the pipeline and skips 75% of each worker's
  samples before the per-sample work (it still downloads them), and its order after the
  skip is not the uninterrupted run's.
- LitData: ``StreamingDataset(s3://..., shuffle=True, transform=...)`` in a
  ``StreamingDataLoader``; resume: its ``state_dict`` taken after 48 batches of the epoch,
  ``load_state_dict`` on a fresh loader with an empty cache. Its obstore client options
  get ``allow_http`` (loopback is plain http; real S3 is https).
- Mosaic: ``StreamingDataset`` subclass whose ``__getitem__`` does the work, in its
  ``StreamingDataLoader``; a ``worker_init_fn`` drops the boto3 client inherited over fork
  (without it workers stall for about 60 s and now and then read a corrupted shard).
  Resume: ``state_dict`` after 48 batches, ``load_state_dict`` on a fresh dataset.
- aioloader: ``TarShards`` over the WebDataset shards (prebuilt index or built on the
  fly) in ``DataLoader(workers=2, max_inflight_reads=R)``; resume: ``load_state_dict``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import time
import types
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _path in (HERE.parent, HERE.parents[1]):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import numpy as np  # noqa: E402

from workloads import w6_data  # noqa: E402

PROBE = 17  # the sample whose tensor every system must produce bit for bit


def import_streaming() -> Any:
    """``import streaming`` (MosaicML), with stubs for torchvision and transformers if absent.

    Mosaic's top-level import names a few torchvision and transformers classes that this
    path never uses; the only torchvision wheels for torch 2.13 are CUDA builds, so W6
    installs Mosaic with ``--no-deps`` and stubs those names here.
    """
    import importlib.util

    def stub(name: str, **attrs: Any) -> None:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix not in sys.modules:
                sys.modules[prefix] = types.ModuleType(prefix)
                if i > 1:
                    setattr(
                        sys.modules[".".join(parts[: i - 1])], parts[i - 1], sys.modules[prefix]
                    )
        for key, value in attrs.items():
            setattr(sys.modules[name], key, value)

    if "streaming" in sys.modules:
        return sys.modules["streaming"]
    if importlib.util.find_spec("transformers") is None:
        stub(
            "transformers.feature_extraction_utils", BatchFeature=type("BatchFeature", (dict,), {})
        )
        stub(
            "transformers.tokenization_utils_base", BatchEncoding=type("BatchEncoding", (dict,), {})
        )
        stub("transformers.models.auto.tokenization_auto", AutoTokenizer=object)
    if importlib.util.find_spec("torchvision") is None:
        stub("torchvision.datasets", VisionDataset=type("VisionDataset", (), {}), CIFAR10=object)
        stub("torchvision.transforms.functional", to_tensor=lambda x: x)
    import streaming

    return streaming


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _protocol(line: str) -> None:
    stdout = sys.__stdout__
    assert stdout is not None
    stdout.write(line + "\n")
    stdout.flush()


def _mark(name: str) -> None:
    _protocol(f"MARK {name}")
    sys.stdin.readline()


def _collate_tuples(samples: list[tuple[Any, int, int]]) -> dict[str, Any]:
    images, labels, ids = zip(*samples, strict=True)
    return w6_data.collate(images, labels, ids)


def _work(jpeg: bytes, label: Any, ident: Any) -> tuple[Any, int, int]:
    return w6_data.preprocess(bytes(jpeg)), int(label), int(ident)


class Epoch:
    """Consumes batches: first-batch time, ids seen, the probe tensor's digest."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.first: float | None = None
        self.ids: list[int] = []
        self.probe: str | None = None
        self.batches = 0

    def take(self, batch: dict[str, Any]) -> None:
        if self.first is None:
            self.first = time.perf_counter() - self.started
        ids = [int(i) for i in batch["id"]]
        self.ids.extend(ids)
        self.batches += 1
        if PROBE in ids:
            image = np.ascontiguousarray(np.asarray(batch["image"][ids.index(PROBE)]))
            self.probe = hashlib.sha256(image.tobytes()).hexdigest()


# -- the systems ------------------------------------------------------------------------
def _presigned(spec: dict[str, Any], keys: list[str]) -> list[str]:
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=spec["endpoint"],
        aws_access_key_id=spec["access_key_id"],
        aws_secret_access_key=spec["secret_access_key"],
        region_name=spec["region"],
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    return [
        client.generate_presigned_url(
            "get_object", Params={"Bucket": spec["bucket"], "Key": key}, ExpiresIn=7200
        )
        for key in keys
    ]


def run_webdataset(spec: dict[str, Any], skip: int = 0) -> Iterator[dict[str, Any]]:
    import torch
    import webdataset as wds

    urls = _presigned(spec, spec["keys"])
    workers = spec["workers"]
    per_worker = skip // max(workers, 1)

    def skip_first(source: Iterable[Any]) -> Iterator[Any]:
        for position, sample in enumerate(source):
            if position >= per_worker:
                yield sample

    pipeline = wds.WebDataset(
        urls, shardshuffle=len(urls), seed=spec["seed"], empty_check=False
    ).shuffle(1000)
    if per_worker:
        pipeline = pipeline.compose(skip_first)
    pipeline = pipeline.map(lambda s: _work(s["jpg"], s["cls"], s["id"])).batched(
        spec["batch"], collation_fn=_collate_tuples, partial=True
    )
    loader = torch.utils.data.DataLoader(
        pipeline,
        batch_size=None,
        num_workers=workers,
        prefetch_factor=4 if workers else None,
    )
    yield from loader


def _litdata_dataset(spec: dict[str, Any], cache: Path) -> Any:
    import litdata
    from litdata.streaming import downloader

    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True  # type: ignore[index]
    options = {
        "endpoint_url": spec["endpoint"],
        "aws_access_key_id": spec["access_key_id"],
        "aws_secret_access_key": spec["secret_access_key"],
        "region_name": spec["region"],
    }
    dataset = litdata.StreamingDataset(
        f"s3://{spec['bucket']}/{spec['prefix']}",
        cache_dir=str(cache),
        shuffle=True,
        seed=spec["seed"],
        storage_options=options,
        transform=lambda s: _work(s["jpg"], s["label"], s["id"]),
    )
    return litdata.StreamingDataLoader(
        dataset,
        batch_size=spec["batch"],
        num_workers=spec["workers"],
        collate_fn=_collate_tuples,
    )


def _mosaic_worker_init(_: int) -> None:
    import torch

    info = torch.utils.data.get_worker_info()
    if info is not None:
        for stream in info.dataset.streams:
            stream._downloader.clean_up()  # drop the boto3 client inherited over fork


def _mosaic_loader(spec: dict[str, Any], cache: Path) -> Any:
    streaming = import_streaming()
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()

    class Images(streaming.StreamingDataset):  # type: ignore[misc, name-defined]
        def __getitem__(self, index: int) -> Any:
            sample = super().__getitem__(index)
            return _work(sample["jpg"], sample["label"], sample["id"])

    dataset = Images(
        remote=f"s3://{spec['bucket']}/{spec['prefix']}",
        local=str(cache),
        shuffle=True,
        shuffle_seed=spec["seed"],
        batch_size=spec["batch"],
    )
    return streaming.StreamingDataLoader(
        dataset,
        batch_size=spec["batch"],
        num_workers=spec["workers"],
        collate_fn=_collate_tuples,
        worker_init_fn=_mosaic_worker_init,
    )


def known_future_cache() -> Any:
    """``aioloader.sources.KnownFutureCache``, or None where this aioloader lacks it."""
    import aioloader.sources

    found = getattr(aioloader.sources, "KnownFutureCache", None)
    if found is None:
        try:
            from aioloader.sources import _cache
        except ImportError:
            return None
        found = getattr(_cache, "KnownFutureCache", None)
    return found


def _aioloader_parts(spec: dict[str, Any], start_step: int = 0) -> tuple[Any, Any]:
    import aioloader
    from tests._support.s3 import S3Info

    info = S3Info(
        spec["endpoint"], spec["bucket"], spec["access_key_id"], spec["secret_access_key"]
    )
    store = info.store(max_retries=2)
    options: dict[str, Any] = {}
    cache = None
    if spec.get("cache_fraction"):
        cache = known_future_cache()(
            max_bytes=int(spec["dataset_bytes"] * spec["cache_fraction"]),
            policy=spec.get("cache_policy", "belady"),
        )
        options["cache"] = cache
    shards = aioloader.TarShards(
        spec["keys"],
        store,
        index_dir=spec["index_dir"],
        max_concurrency=spec["inflight"],
        **options,
    )
    if spec.get("sampler") == "block":
        sizes = [len(index.samples) for index in shards.indices]
        sampler: Any = aioloader.BlockShuffledSampler(  # type: ignore[attr-defined]
            sizes, spec["batch"], window=spec.get("window", 4), drop_last=True
        )
    else:
        sampler = aioloader.ShuffledSampler(len(shards), spec["batch"])
    if cache is not None:
        cache.plan(sampler, spec["seed"], start_step)
    loader = aioloader.DataLoader(
        shards,
        sampler,
        lambda samples, plan: _collate_tuples(samples),
        seed=spec["seed"],
        transform=lambda s, rng: _work(s["jpg"], s["cls"], s["id"]),
        workers=spec["workers"],
        prefetch=spec.get("prefetch", 8),
        max_inflight_reads=spec["inflight"],
    )
    return shards, loader


def _run_async(function: Callable[[], Any]) -> Any:
    import anyio

    return anyio.run(function, backend="asyncio", backend_options={"use_uvloop": True})


# -- one row, once ----------------------------------------------------------------------
def run(spec: dict[str, Any]) -> dict[str, Any]:
    """The cold epoch and the resume of the row ``spec``; the parent reads counters at marks."""
    system = spec["system"]
    scratch = Path(spec["scratch"])
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    steps = spec["images"] // spec["batch"]
    resume_step = steps * 3 // 4
    result: dict[str, Any] = {}
    _mark("start")
    started = time.perf_counter()
    epoch = Epoch(started)
    state: Any = None
    extra: dict[str, Any] = {}
    if system == "webdataset":
        for batch in run_webdataset(spec):
            epoch.take(batch)
    elif system in ("litdata", "mosaic"):
        make = _litdata_dataset if system == "litdata" else _mosaic_loader
        loader = make(spec, scratch / "cache")
        for batch in loader:
            epoch.take(batch)
            if epoch.batches == resume_step:
                state = loader.state_dict()
        del loader
    else:

        async def consume() -> None:
            shards, loader = _aioloader_parts(spec)
            async with loader.stream(0, steps) as stream:
                async for batch in stream:
                    epoch.take(batch)
            cache = getattr(shards, "cache", None)
            if cache is not None:
                stats = dataclasses.asdict(cache.statistics())
                extra["cache"] = {k: v for k, v in stats.items() if _plain(v)}

        _run_async(consume)
    seconds = time.perf_counter() - started
    result["disk_bytes"] = w6_data.folder_bytes(scratch / "cache")
    if spec.get("index_dir"):
        result["disk_bytes"] += w6_data.folder_bytes(Path(spec["index_dir"]))
    _mark("epoch")
    shutil.rmtree(scratch / "cache", ignore_errors=True)
    result.update(
        seconds=seconds,
        first_batch=epoch.first,
        batches=epoch.batches,
        exactly_once=w6_data.exactly_once(epoch.ids, spec["images"]),
        probe=epoch.probe,
        **extra,
    )
    result["resume_first_batch"], result["resume_how"] = _resume(spec, state, resume_step)
    shutil.rmtree(scratch, ignore_errors=True)
    return result


def _plain(value: Any) -> bool:
    return isinstance(value, (int, float, str, bool)) or value is None


def _resume(spec: dict[str, Any], state: Any, resume_step: int) -> tuple[float, str]:
    system = spec["system"]
    scratch = Path(spec["scratch"]) / "cache"
    started = time.perf_counter()
    if system == "webdataset":
        skip = resume_step * spec["batch"]
        for _ in run_webdataset(spec, skip=skip):
            return time.perf_counter() - started, "no resume: rebuilt, skipped 75% (downloaded)"
    if system in ("litdata", "mosaic"):
        if state is None:
            raise RuntimeError(f"{system}: no state_dict was taken at step {resume_step}")
        make = _litdata_dataset if system == "litdata" else _mosaic_loader
        loader = make(spec, scratch)
        loader.load_state_dict(state)
        for _ in loader:
            first = time.perf_counter() - started
            del loader
            return first, "StreamingDataLoader.load_state_dict"
        raise RuntimeError(f"{system} gave no batch after resuming")

    async def first_batch() -> float:
        _, loader = _aioloader_parts(spec, start_step=resume_step)
        loader.load_state_dict({"seed": spec["seed"], "next_step": resume_step})
        async for _ in loader:
            return time.perf_counter() - started
        raise RuntimeError("aioloader gave no batch after resuming")

    return _run_async(first_batch), "DataLoader.load_state_dict"


def main() -> None:
    spec = json.loads(sys.argv[1])
    with contextlib.redirect_stdout(sys.stderr):  # only the protocol lines go to stdout
        result = run(spec)
    _protocol("RESULT " + json.dumps(result))
    os._exit(0)  # worker processes and portal threads of the peers end with us


if __name__ == "__main__":
    main()
