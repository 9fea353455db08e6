"""W8: multi-epoch training with a cache smaller than the dataset (issues 20 and 25).

W6's JPEGs in about 32 shards per format, read through the +20 ms relay for three epochs on
one loader with a cache of 25% and 50% of the dataset; the relay counts bytes and requests
per epoch, against the known optimum ``dataset - cache``. docs/benchmarks.md (W8) gives the
rows and the checks. ``python benchmarks/workloads/w8_cache.py SPEC_JSON`` runs one row (the
child).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for _path in (HERE.parent, ROOT):  # harness, systems, workloads; tests._support
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import harness  # noqa: E402
from harness import Case  # noqa: E402
from storage import missing, start  # noqa: E402
from systems import aioloader as aioloader_system  # noqa: E402
from systems.s3spec import peer_env  # noqa: E402

from workloads import w6_data  # noqa: E402
from workloads.w6_systems import peer_loader  # noqa: E402

ANCHORS = (0, 17, 1000, 4095)  # samples whose tensors the parent computes itself
NOTES = [
    "Bytes and requests are counted at the relay in front of SeaweedFS, per epoch (the "
    "child pauses at each boundary while the parent reads the counters). Every system "
    "iterates one epoch a loop (aioloader: `async for batch in loader`, so nothing is "
    "read ahead across an epoch boundary). The cache budget bounds everything a system "
    "holds: aioloader's max_bytes covers the samples kept and those read ahead (the disk "
    "rows: a quarter of it in memory for read-ahead, the rest on disk). Optimum for "
    "epochs 2+: dataset bytes - cache bytes (no policy can fetch less); 'eN / optimum' "
    "divides epoch N's bytes by it, 'e1 / dataset' epoch 1's by the dataset (each system "
    "its own stored bytes, tar headers included); 'all epochs / optimum' divides the "
    "bytes of all epochs by dataset + (epochs - 1) x optimum. "
    "Every epoch of every row delivered each sample once and the "
    "same decoded tensor per sample (CRC-32, anchored by preprocess() in the parent). "
    "Ratios: epoch-2 images/s against WebDataset (no cache). One run per round.",
]


@dataclasses.dataclass(frozen=True)
class W8Config:
    images: int = 4096
    batch: int = 64
    seed: int = 2026
    workers: int = 2
    inflight: int = 64
    epochs: int = 3
    fractions: tuple[float, ...] = (0.25, 0.5)
    shards: int = 32  # every format cut into about this many shards (tar: images / shards)
    peers: bool = True
    row_timeout: float = 600.0  # seconds for all epochs of one row (Mosaic may thrash)

    def __post_init__(self) -> None:
        for name in ("images", "batch", "shards", "epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"W8Config.{name} must be >= 1 but got {getattr(self, name)}")
        if self.images % self.batch or self.images % self.shards:
            raise ValueError(
                f"W8Config.images must be a multiple of batch ({self.batch}) and of shards "
                f"({self.shards}) so that every epoch is whole batches but got {self.images}"
            )


@dataclasses.dataclass
class Row:
    name: str
    group: str
    spec: dict[str, Any]
    note: str
    requires: tuple[str, ...] = ()


# -- the byte accounting (pure) -----------------------------------------------------------
def cache_bytes(fraction: float, dataset_bytes: int) -> int:
    """The cache bound of a row: ``int(fraction x dataset bytes)``."""
    return int(fraction * dataset_bytes)


def optimum_bytes(fraction: float, dataset_bytes: int) -> int:
    """Fewest bytes any policy fetches in an epoch after the first: dataset - cache."""
    return dataset_bytes - cache_bytes(fraction, dataset_bytes)


def epoch_facts(
    epochs: list[dict[str, float]], dataset_bytes: int, fraction: float | None
) -> dict[str, Any]:
    """The table's cells for one row: per epoch MB, requests, images/s and byte ratios.

    ``epochs`` holds ``{"bytes", "requests", "images_per_s"}`` per epoch, in order;
    ``fraction`` is None for a row without a cache (its optimum is the whole dataset).
    """
    optimum = dataset_bytes if fraction is None else optimum_bytes(fraction, dataset_bytes)
    facts: dict[str, Any] = {
        "dataset MB": dataset_bytes / 1e6,
        "cache MB": 0.0 if fraction is None else cache_bytes(fraction, dataset_bytes) / 1e6,
        "optimum MB (epochs 2+)": optimum / 1e6,
    }
    for number, epoch in enumerate(epochs, 1):
        facts[f"e{number} MB"] = epoch["bytes"] / 1e6
        facts[f"e{number} requests"] = int(epoch["requests"])
        facts[f"e{number} images/s"] = epoch["images_per_s"]
        if number == 1:
            facts["e1 / dataset"] = round(epoch["bytes"] / dataset_bytes, 3)
        else:
            facts[f"e{number} / optimum"] = round(epoch["bytes"] / optimum, 3)
    if epochs:  # read-ahead may cross an epoch boundary; the total cannot be misattributed
        fewest = dataset_bytes + (len(epochs) - 1) * optimum
        facts["all epochs / optimum"] = round(sum(e["bytes"] for e in epochs) / fewest, 3)
    return facts


# -- aioloader: the one place that builds the cache (adapt here when the API changes) -----
def aioloader_cache(tier: str, max_bytes: int, scratch: Path) -> Any:
    """A cache of ``max_bytes`` in ``tier`` ("memory" or "disk", the latter under scratch)."""
    from aioloader.sources import KnownFutureCache

    # Everything the cache holds counts against the row's budget, as the peers' caches do:
    # max_bytes bounds the samples kept and those read ahead of their step together.
    if tier == "memory":
        return KnownFutureCache(max_bytes=max_bytes)
    # the disk tier keeps the samples; memory holds the read-ahead (a quarter of the budget)
    memory = max_bytes // 4
    return KnownFutureCache(
        max_bytes=memory, disk_dir=str(scratch / "disk"), disk_bytes=max_bytes - memory
    )


def aioloader_loader(spec: dict[str, Any], scratch: Path) -> tuple[Any, Any]:
    """``(TarShards, DataLoader)`` of an aioloader row; the engine plans the cache itself."""
    cache = aioloader_cache(spec["tier"], spec["cache_bytes"], scratch)
    return aioloader_system.tar_loader(spec, w6_data.work, w6_data.collate_items, cache)


# -- rows -----------------------------------------------------------------------------------
def rows(cfg: W8Config, sizes: dict[str, int], keys: list[str], index_dir: str) -> list[Row]:
    """Every row: aioloader (memory, disk), then the peers (when ``cfg.peers``)."""
    common = {"images": cfg.images, "batch": cfg.batch, "seed": cfg.seed, "epochs": cfg.epochs}
    common["workers"] = cfg.workers

    def spec(system: str, fraction: float | None, stored: str, **extra: Any) -> dict[str, Any]:
        size = sizes.get(stored, 0)  # a format a missing peer could not write is never read
        cached = {} if fraction is None else {"cache_bytes": cache_bytes(fraction, size)}
        return {
            **common,
            "system": system,
            "fraction": fraction,
            "dataset_bytes": size,
            **cached,
            **extra,
        }

    tars = {"keys": keys, "index_dir": index_dir, "inflight": cfg.inflight}
    out: list[Row] = []
    for fraction in cfg.fractions:
        for tier in ("memory", "disk"):
            for sampler, label in (
                ("block", "BlockShuffledSampler(window=4)"),
                ("global", "ShuffledSampler"),
            ):
                out.append(
                    Row(
                        f"aioloader {tier} tier {fraction:.0%}, {label}",
                        "aioloader",
                        spec("aioloader", fraction, "tar", tier=tier, sampler=sampler, **tars),
                        f"TarShards(cache=KnownFutureCache, {tier} tier), {label}, "
                        f"DataLoader(workers={cfg.workers})",
                    )
                )
    if not cfg.peers:
        return out
    for fraction in cfg.fractions:
        out.append(
            Row(
                f"MosaicML Streaming cache_limit {fraction:.0%}",
                "mosaic",
                spec("mosaic", fraction, "mds", prefix="mds"),
                "StreamingDataset(cache_limit, shuffle=True) + StreamingDataLoader, local disk",
                ("streaming", "torch", "boto3"),
            )
        )
        out.append(
            Row(
                f"LitData max_cache_size {fraction:.0%}",
                "litdata",
                spec("litdata", fraction, "litdata", prefix="litdata"),
                "StreamingDataset(max_cache_size, shuffle=True) + StreamingDataLoader, local disk",
                ("litdata", "torch"),
            )
        )
    out.append(
        Row(
            "WebDataset, no cache",
            "webdataset",
            spec("webdataset", None, "tar", keys=keys),
            "WebDataset(shardshuffle).shuffle(1000), torch DataLoader, presigned URLs",
            ("webdataset", "torch", "boto3"),
        )
    )
    return out


# -- the parent -------------------------------------------------------------------------------
def prepare(cfg: W8Config, log: Callable[[str], None]) -> dict[str, Path]:
    """The images (W6's, cached) and every format at W8's shard size; returns the folders."""
    root = w6_data.cache_dir(cfg.images, cfg.seed)
    folder = w6_data.generate(root, cfg.images, cfg.seed)
    log(f"  W8: images and formats under {root}")
    per_shard = -(-cfg.images // cfg.shards)
    chunk_bytes = -(-w6_data.dataset_bytes(folder) // cfg.shards) + 4096  # about one tar shard
    w8 = root / f"w8-{cfg.shards}"
    formats = {"jpeg": folder, "tar": w8 / "tar"}
    w6_data.write_webdataset(folder, cfg.images, w8 / "tar", per_shard)
    if cfg.peers and not missing(("streaming",)):
        w6_data.write_mosaic(folder, cfg.images, w8 / "mds", chunk_bytes)
        formats["mds"] = w8 / "mds"
    if cfg.peers and not missing(("litdata",)):
        w6_data.write_litdata(folder, cfg.images, w8 / "litdata", chunk_bytes)
        formats["litdata"] = w8 / "litdata"
    return formats


def anchors(folder: Path, images: int) -> dict[int, int]:
    """CRC-32 of ``preprocess`` of a few JPEGs, computed here: what every row must match."""
    return {
        i: zlib.crc32(w6_data.preprocess(w6_data.read_jpeg(folder, i)).tobytes())
        for i in ANCHORS
        if i < images
    }


class Checks:
    """Each epoch holds every id once, and each id's tensor CRC is the same everywhere."""

    def __init__(self, images: int, anchored: dict[int, int]) -> None:
        self.images = images
        self.reference: dict[int, int] = dict(anchored)

    def epoch(self, row: str, number: int, samples: list[list[int]]) -> None:
        ids = [i for i, _ in samples]
        once = w6_data.exactly_once(ids, self.images)
        if once != "yes":
            raise AssertionError(f"{row}: epoch {number} samples: {once}")
        for i, crc in samples:
            expected = self.reference.setdefault(i, crc)
            if crc != expected:
                raise AssertionError(
                    f"{row}: epoch {number}: sample {i}'s tensor has CRC {crc:08x}, "
                    f"not {expected:08x} as elsewhere"
                )


def run_child(
    spec: dict[str, Any], relay: Any, timeout: float
) -> tuple[dict[str, Any], list[dict[str, float]]]:
    """One row in a fresh process: its result and the relay's counters at every mark."""
    marks: list[dict[str, float]] = []

    def on_mark(_: str) -> None:
        marks.append({**relay.counters(), "time": time.perf_counter()})

    command = [sys.executable, str(HERE / "w8_cache.py"), json.dumps(spec)]
    result, timed_out, code = harness.run_child(command, peer_env(spec), ROOT, timeout, on_mark)
    if result is None:
        if timed_out and marks:
            marks.append({**relay.counters(), "time": time.perf_counter()})
            return {"timed_out": True}, marks
        raise RuntimeError(f"the {spec['system']} child ended with code {code}")
    return result, marks


def per_epoch(marks: list[dict[str, float]], images: int) -> list[dict[str, float]]:
    """Counters between consecutive marks: bytes, requests and images/s of each epoch."""
    out = []
    for before, after in itertools.pairwise(marks):
        seconds = after["time"] - before["time"]
        out.append(
            {
                "bytes": after["bytes_to_client"] - before["bytes_to_client"],
                "requests": after["requests"] - before["requests"],
                "images_per_s": images / seconds,
            }
        )
    return out


def cases(cfg: W8Config, log: Callable[[str], None], stack: contextlib.ExitStack) -> list[Any]:
    """Prepare the data, start the server and the relay (stopped by ``stack``), build rows."""
    formats = prepare(cfg, log)
    others = {k: formats[k] for k in ("mds", "litdata") if k in formats}
    rig = start(stack, "w8-bench", ("tar", formats["tar"]), others)
    sizes = {k: w6_data.folder_bytes(formats[k]) for k in ("tar", *others)}
    log(
        f"  W8: {len(rig.keys)} tar shards ({sizes['tar']:,} bytes) and the peers' formats uploaded"
    )
    checks = Checks(cfg.images, anchors(formats["jpeg"], cfg.images))
    relay, credentials = rig.relay, rig.spec(rig.relay.endpoint)
    out = []
    for row in rows(cfg, sizes, rig.keys, rig.index_dir):
        spec = {**row.spec, **credentials}
        spec["scratch"] = str(Path(tempfile.gettempdir()) / f"aioloader-w8-run-{os.getpid()}")
        case = Case(
            workload="W8",
            system=row.name,
            metric="epoch-2 images/s",
            measure=lambda: 0.0,
            group=row.group,
            note=row.note,
            baseline=row.group == "webdataset",
        )
        absent = missing(row.requires)
        if absent:
            case.error = f"not installed: {', '.join(absent)}"
        else:
            case.measure = _measure(case, spec, relay, checks, cfg)
        out.append(case)
    return out


def _measure(
    case: Any, spec: dict[str, Any], relay: Any, checks: Checks, cfg: W8Config
) -> Callable[[], float]:
    calls = [0]

    def measure() -> float:
        calls[0] += 1
        if calls[0] == 1:  # the warm-up round: one epoch, its samples checked before timing
            result, marks = run_child({**spec, "epochs": 1}, relay, cfg.row_timeout)
            if result.get("timed_out"):
                raise TimeoutError(f"the checking epoch took over {cfg.row_timeout:.0f} s")
            checks.epoch(case.system, 0, result["epochs"][0])
            return per_epoch(marks, cfg.images)[0]["images_per_s"]
        result, marks = run_child(spec, relay, cfg.row_timeout)
        epochs = per_epoch(marks, cfg.images)
        if result.get("timed_out"):
            done = len(marks) - 2
            case.facts.update(epoch_facts(epochs, spec["dataset_bytes"], spec["fraction"]))
            case.facts[f"e{done + 1} images/s"] = 0.0
            raise TimeoutError(
                f"epoch {done + 1} unfinished after {cfg.row_timeout:.0f} s for the row; "
                f"{epochs[-1]['bytes'] / 1e6:,.0f} MB and {epochs[-1]['requests']:,} "
                "requests so far"
            )
        for number, samples in enumerate(result["epochs"], 1):
            checks.epoch(case.system, number, samples)
        if len(epochs) != cfg.epochs:
            raise RuntimeError(f"{len(epochs)} epochs counted, not {cfg.epochs}")
        case.facts.update(epoch_facts(epochs, spec["dataset_bytes"], spec["fraction"]))
        case.facts["same samples"] = "yes"
        if "cache" in result:
            c = result["cache"]
            case.facts["cache"] = (
                f"{c['hits']:,} hits, {c['misses']:,} misses, {c['requests']:,} GETs, "
                f"{c['bytes_evicted'] / 1e6:,.0f} MB evicted"
            )
        return epochs[1]["images_per_s"] if len(epochs) > 1 else epochs[0]["images_per_s"]

    return measure


def targets(cases: list[Any]) -> list[dict[str, Any]]:
    """Issue 20's and 25's byte targets, on the rows that ran."""
    mine = [c for c in cases if c.workload == "W8" and c.values]
    out: list[dict[str, Any]] = []
    for case in mine:
        if case.group != "aioloader":
            continue
        facts = case.facts
        e1 = facts.get("e1 / dataset")
        if e1 is not None:
            text = f"W8: {case.system}: epoch 1 bytes <= 1.02x dataset"
            out.append(harness.fact_target(text, f"{e1:.3f}x", e1 <= 1.02))
        later = [v for k, v in facts.items() if k.endswith("/ optimum")]
        if later:
            bound = 1.1 if "Block" in case.system else 1.2
            worst = max(later)
            text = f"W8: {case.system}: epochs 2+ bytes <= {bound}x optimum"
            out.append(harness.fact_target(text, f"{worst:.3f}x (worst epoch)", worst <= bound))
    for case in mine:
        if case.group == "aioloader" and "50%" in case.system and "Block" in case.system:
            theirs = next((c for c in mine if c.group == "mosaic" and "50%" in c.system), None)
            if theirs is None:
                continue
            ours = sum(v for k, v in case.facts.items() if k in ("e2 MB", "e3 MB"))
            their = sum(v for k, v in theirs.facts.items() if k in ("e2 MB", "e3 MB"))
            value = ours / their if their else float("inf")
            text = f"W8: {case.system}: epochs 2-3 bytes <= 0.6x MosaicML's (50%)"
            measured = f"{value:.2f}x ({ours:,.0f} vs {their:,.0f} MB)"
            out.append(harness.fact_target(text, measured, value <= 0.6))
    return out


# -- the child --------------------------------------------------------------------------------
class Epochs:
    """Batches into epochs: (id, tensor CRC) of every sample, a mark at each boundary."""

    def __init__(self, images: int) -> None:
        self.images = images
        self.epochs: list[list[list[int]]] = [[]]

    def take(self, batch: dict[str, Any]) -> None:
        import numpy as np

        images = batch["image"]
        for position, ident in enumerate(batch["id"]):
            tensor = np.ascontiguousarray(np.asarray(images[position]))
            self.epochs[-1].append([int(ident), zlib.crc32(tensor.tobytes())])
        if len(self.epochs[-1]) >= self.images:
            harness.child_mark()
            self.epochs.append([])


def _webdataset_epochs(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    from systems import webdataset

    for epoch in range(spec["epochs"]):
        seeded = {**spec, "seed": spec["seed"] + epoch}
        yield from webdataset.batches(seeded, w6_data.work, w6_data.collate_items)


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """All epochs of the row ``spec``; marks before the loader and after every epoch."""
    scratch = Path(spec["scratch"])
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    epochs = Epochs(spec["images"])
    result: dict[str, Any] = {}
    harness.child_mark()
    system = spec["system"]
    if system == "webdataset":
        for batch in _webdataset_epochs(spec):
            epochs.take(batch)
    elif system in ("litdata", "mosaic"):
        loader = peer_loader(spec, scratch / "cache", spec["cache_bytes"])
        for _ in range(spec["epochs"]):
            for batch in loader:
                epochs.take(batch)
    else:

        async def consume() -> None:
            shards, loader = aioloader_loader(spec, scratch)
            for _ in range(spec["epochs"]):  # an epoch a loop, as the peers are run
                async for batch in loader:
                    epochs.take(batch)
            statistics = shards.cache.statistics()
            result["cache"] = {
                k: v for k, v in dataclasses.asdict(statistics).items() if isinstance(v, int)
            }

        aioloader_system.run_async(consume)
    result["epochs"] = epochs.epochs[: spec["epochs"]]
    shutil.rmtree(scratch, ignore_errors=True)
    return result


# -- the workload, as run.py crosses it -----------------------------------------------------
NAME = "W8"
OPT_IN = True  # many minutes
TITLE = (
    "three epochs with a cache of 25% and 50% of the dataset: W6's JPEGs in about 32 "
    "shards from SeaweedFS, +20 ms per request; bytes and requests per epoch"
)


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W8's cases and notes (``--w8-images`` sets the dataset size)."""
    images = getattr(args, "w8_images", None) or 4096
    cfg = W8Config(images=512, shards=16, peers=False) if quick else W8Config(images=images)
    log("W8: generating JPEGs and formats (cached), starting SeaweedFS and the relay")
    if not harness.can_run("W8", ("obstore", "PIL", "webdataset"), log, weed=True):
        return [], ["Left out: SeaweedFS (`weed`), Pillow, obstore or webdataset is missing."]
    return cases(cfg, log, stack), [*NOTES, f"Settings: {cfg}."]


if __name__ == "__main__":
    harness.child_main(run)
