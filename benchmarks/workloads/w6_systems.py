"""W6's child: one row, once, in a fresh process: a cold epoch, then a resume at 75%.

``python benchmarks/workloads/w6_systems.py SPEC_JSON``; it speaks ``harness.run_child``'s
protocol (``MARK start`` before the loader is built, ``MARK epoch`` after the epoch, then
``RESULT {json}``). docs/benchmarks.md (W6) says how each system is set up and resumed.
"""

from __future__ import annotations

import dataclasses
import hashlib
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
def peer_loader(spec: dict[str, Any], cache: Path, cache_bytes: int | None = None) -> Any:
    """LitData's or Mosaic's ``StreamingDataLoader`` of the row (local cache bounded by
    ``cache_bytes``: LitData's ``max_cache_size``, Mosaic's ``cache_limit``)."""
    work, collate = w6_data.work, w6_data.collate_items
    if spec["system"] == "litdata":
        return litdata.loader(spec, cache, work, collate, max_cache_size=cache_bytes)
    return mosaic.loader(spec, cache, work, collate, cache_limit=cache_bytes)


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
        loader = peer_loader(spec, scratch / "cache")
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
        loader = peer_loader(spec, scratch)
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


if __name__ == "__main__":
    harness.child_main(run)
