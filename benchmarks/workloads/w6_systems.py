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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _path in (HERE.parent, HERE.parents[1]):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import harness  # noqa: E402
import numpy as np  # noqa: E402
from systems import aioloader as aioloader_system  # noqa: E402
from systems import litdata, mosaic, webdataset  # noqa: E402

from workloads import w6_data  # noqa: E402

PROBE = 17  # the sample whose tensor every system must produce bit for bit


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


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
def _peer_loader(spec: dict[str, Any], cache: Path) -> Any:
    """LitData's or Mosaic's ``StreamingDataLoader`` of the row."""
    make = litdata.loader if spec["system"] == "litdata" else mosaic.loader
    return make(spec, cache, w6_data.work, w6_data.collate_items)


def _aioloader_parts(spec: dict[str, Any]) -> tuple[Any, Any]:
    cache = None
    if spec.get("cache_fraction"):
        import aioloader

        cache = aioloader.KnownFutureCache(
            max_bytes=int(spec["dataset_bytes"] * spec["cache_fraction"])
        )
    return aioloader_system.tar_loader(spec, w6_data.work, w6_data.collate_items, cache)


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
    harness.child_mark("start")
    started = time.perf_counter()
    epoch = Epoch(started)
    state: Any = None
    extra: dict[str, Any] = {}
    if system == "webdataset":
        for batch in webdataset.batches(spec, w6_data.work, w6_data.collate_items):
            epoch.take(batch)
    elif system in ("litdata", "mosaic"):
        loader = _peer_loader(spec, scratch / "cache")
        for batch in loader:
            epoch.take(batch)
            if epoch.batches == resume_step:
                state = loader.state_dict()
        del loader
    else:

        async def consume() -> Any:
            shards, loader = _aioloader_parts(spec)
            taken = None
            async with loader.stream(0, steps) as stream:
                async for batch in stream:
                    epoch.take(batch)
                    if epoch.batches == resume_step:
                        taken = loader.state_dict()
            cache = getattr(shards, "cache", None)
            if cache is not None:
                stats = dataclasses.asdict(cache.statistics())
                extra["cache"] = {k: v for k, v in stats.items() if _plain(v)}
            return taken

        state = aioloader_system.run_async(consume)
    seconds = time.perf_counter() - started
    result["disk_bytes"] = w6_data.folder_bytes(scratch / "cache")
    if spec.get("index_dir"):
        result["disk_bytes"] += w6_data.folder_bytes(Path(spec["index_dir"]))
    harness.child_mark("epoch")
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
        for _ in webdataset.batches(spec, w6_data.work, w6_data.collate_items, skip=skip):
            return time.perf_counter() - started, "no resume: rebuilt, skipped 75% (downloaded)"
    if system in ("litdata", "mosaic"):
        if state is None:
            raise RuntimeError(f"{system}: no state_dict was taken at step {resume_step}")
        loader = _peer_loader(spec, scratch)
        loader.load_state_dict(state)
        for _ in loader:
            first = time.perf_counter() - started
            del loader
            return first, "StreamingDataLoader.load_state_dict"
        raise RuntimeError(f"{system} gave no batch after resuming")

    async def first_batch() -> float:
        _, loader = _aioloader_parts(spec)
        loader.load_state_dict(state)
        async for _ in loader:
            return time.perf_counter() - started
        raise RuntimeError("aioloader gave no batch after resuming")

    return aioloader_system.run_async(first_batch), "DataLoader.load_state_dict"


def main() -> None:
    spec = json.loads(sys.argv[1])
    with contextlib.redirect_stdout(sys.stderr):  # only the protocol lines go to stdout
        result = run(spec)
    harness.child_say("RESULT " + json.dumps(result))
    os._exit(0)  # worker processes and portal threads of the peers end with us


if __name__ == "__main__":
    main()
