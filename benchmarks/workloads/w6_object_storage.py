"""W6: ImageNet-like JPEGs from object storage against LitData, MosaicML Streaming, WebDataset.

W6's data (``w6_data``) in each system's own format on SeaweedFS, read through the +20 ms
relay and directly; every row runs in a fresh child process (``w6_systems``) per round.
docs/benchmarks.md (W6) gives the rows, the measures and how to install the peers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
from harness import Case
from storage import Relay, Rig, missing, start
from systems.s3spec import peer_env

from workloads import w6_data

HERE = Path(__file__).resolve().parent
CHILD_TIMEOUT = 600.0


@dataclasses.dataclass(frozen=True)
class W6Config:
    images: int = 4096
    batch: int = 64
    seed: int = 2026
    workers: int = 2
    inflight: int = 256
    direct: bool = True  # also read without the relay


@dataclasses.dataclass
class Row:
    """One configuration of one system: what the child gets, plus the path it reads."""

    name: str
    group: str
    path: str  # "+20 ms" or "direct"
    spec: dict[str, Any]
    note: str
    requires: tuple[str, ...] = ()


# -- cases ------------------------------------------------------------------------------
def prepare(cfg: W6Config, log: Callable[[str], None]) -> dict[str, Path]:
    """Generate (or reuse) the images and every format; returns their folders."""
    root = w6_data.cache_dir(cfg.images, cfg.seed)
    log(f"  W6: images and formats under {root} (generated once)")
    folder = w6_data.generate(root, cfg.images, cfg.seed)
    w6_data.write_webdataset(folder, cfg.images, root / "wds")
    formats = {"jpeg": folder, "wds": root / "wds"}
    if not missing(("litdata",)):
        w6_data.write_litdata(folder, cfg.images, root / "litdata")
        formats["litdata"] = root / "litdata"
    if not missing(("streaming",)):
        w6_data.write_mosaic(folder, cfg.images, root / "mds")
        formats["mds"] = root / "mds"
    return formats


def rows(cfg: W6Config, keys: list[str], index_dir: str, dataset_bytes: int) -> list[Row]:
    """Every configuration, on the +20 ms path and (fewer) directly."""
    common = {"images": cfg.images, "batch": cfg.batch, "seed": cfg.seed}
    w, r = cfg.workers, cfg.inflight
    out: list[Row] = []
    paths = ["+20 ms", "direct"] if cfg.direct else ["+20 ms"]
    for path in paths:
        out.append(
            Row(
                f"{path}: WebDataset, {w} workers",
                "webdataset",
                path,
                {**common, "system": "webdataset", "workers": w, "keys": keys},
                "WebDataset(shardshuffle).shuffle(1000).map.batched(64), torch DataLoader, "
                "presigned URLs through curl",
                ("webdataset", "torch"),
            )
        )
        out.append(
            Row(
                f"{path}: LitData, {w} workers",
                "litdata",
                path,
                {**common, "system": "litdata", "workers": w, "prefix": "litdata"},
                "StreamingDataset(shuffle=True, transform) + StreamingDataLoader",
                ("litdata", "torch"),
            )
        )
        out.append(
            Row(
                f"{path}: MosaicML Streaming, {w} workers",
                "mosaic",
                path,
                {**common, "system": "mosaic", "workers": w, "prefix": "mds"},
                "StreamingDataset subclass + StreamingDataLoader, worker_init_fn drops the "
                "inherited boto3 client",
                ("streaming", "torch", "boto3"),
            )
        )
        aio = {**common, "system": "aioloader", "workers": w, "inflight": r, "keys": keys}
        out.append(
            Row(
                f"{path}: aioloader TarShards, global shuffle, {w} threads, {r} reads in flight",
                "aioloader",
                path,
                {**aio, "index_dir": index_dir},
                "TarShards (prebuilt index) + ShuffledSampler, DataLoader(workers=2), uvloop",
            )
        )
        cached = {"cache_fraction": 0.25, "dataset_bytes": dataset_bytes}
        block = {"sampler": "block", "window": 4}
        cache_note = (
            "KnownFutureCache(max_bytes=25% of the data): the loader plans it; shards the "
            "horizon needs whole are read with one GET each"
        )
        if path == "+20 ms":
            out.append(
                Row(
                    f"{path}: aioloader TarShards, index built on the fly",
                    "aioloader",
                    path,
                    {**aio, "index_dir": None},
                    "as above, no saved index: every run reads the tar headers first",
                )
            )
            out.append(
                Row(
                    f"{path}: aioloader global shuffle + known-future cache (25%)",
                    "aioloader",
                    path,
                    {**aio, "index_dir": index_dir, **cached},
                    cache_note,
                )
            )
        out.append(
            Row(
                f"{path}: aioloader TarShards, block shuffle (window 4 shards)",
                "aioloader",
                path,
                {**aio, "index_dir": index_dir, **block},
                "BlockShuffledSampler(window=4): reads of a batch coalesce into ranged GETs",
            )
        )
        if path == "+20 ms":
            out.append(
                Row(
                    f"{path}: aioloader block shuffle + known-future cache (25%)",
                    "aioloader",
                    path,
                    {**aio, "index_dir": index_dir, **block, **cached},
                    cache_note,
                )
            )
            out.append(
                Row(
                    f"{path}: aioloader block shuffle + cache, index built on the fly",
                    "aioloader",
                    path,
                    {**aio, "index_dir": None, **block, **cached},
                    "no saved index: each shard is indexed from one streamed GET whose samples "
                    "go to the cache",
                )
            )
    return out


def cases(cfg: W6Config, log: Callable[[str], None], stack: contextlib.ExitStack) -> list[Case]:
    """Prepare the data, start the server and the relay (stopped by ``stack``), build rows."""
    formats = prepare(cfg, log)
    others = {k: formats[k] for k in ("litdata", "mds") if k in formats}
    rig = start(stack, "w6-bench", ("wds", formats["wds"]), others)
    log(f"  W6: uploaded {len(rig.keys)} WebDataset shards and the peers' formats")
    probe = w6_data.preprocess(w6_data.read_jpeg(formats["jpeg"], 17))
    reference = hashlib.sha256(probe.tobytes()).hexdigest()
    dataset_bytes = w6_data.dataset_bytes(formats["jpeg"])
    out = []
    for row in rows(cfg, rig.keys, rig.index_dir, dataset_bytes):
        relayed = row.path == "+20 ms"
        spec = {**row.spec, **rig.spec(rig.relay.endpoint if relayed else rig.info.endpoint)}
        spec["scratch"] = str(Path(tempfile.gettempdir()) / f"aioloader-w6-run-{os.getpid()}")
        case = Case(
            workload="W6",
            system=row.name,
            metric="images/s",
            measure=lambda: 0.0,
            baseline=row.name == "+20 ms: WebDataset, 2 workers",
            group=row.group,
            note=row.note,
            compare_to=f"{row.path}: WebDataset, {cfg.workers} workers",
        )
        case.facts["shards"] = len(rig.keys)
        absent = missing(row.requires)
        if absent:
            case.error = f"not installed: {', '.join(absent)}"
        else:
            case.measure = _measure(case, spec, rig, relayed, reference, cfg.images)
        out.append(case)
    return out


def _measure(
    case: Case, spec: dict[str, Any], rig: Rig, relayed: bool, reference: str, images: int
) -> Callable[[], float]:
    relay = rig.relay if relayed else None
    runs: dict[str, list[Any]] = {}

    def measure() -> float:
        result, counted = run_child(spec, relay, rig.weed_pid)
        if result["probe"] != reference:
            raise AssertionError(
                f"sample 17's tensor differs from preprocess() of its JPEG "
                f"({result['probe']} != {reference})"
            )
        if result["batches"] != images // spec["batch"]:
            raise AssertionError(f"{result['batches']} batches, not {images // spec['batch']}")
        values = {
            "first batch s": result["first_batch"],
            "first batch after resume at 75% s": result["resume_first_batch"],
            "S3 CPU-s per 1k images": counted["cpu"] / images * 1000,
            "local disk MB": result["disk_bytes"] / 1e6,
        }
        if relay is not None:
            values["requests/epoch"] = counted["requests"]
            values["MB fetched/epoch"] = counted["bytes_to_client"] / 1e6
        for key, value in values.items():
            runs.setdefault(key, []).append(value)
            median = statistics.median(runs[key])
            case.facts[key] = round(median) if key == "requests/epoch" else median
        once = runs.setdefault("exactly once", [])
        once.append(result["exactly_once"])
        case.facts["exactly once"] = once[-1] if len(set(once)) == 1 else "; ".join(once)
        case.facts["resume"] = result["resume_how"]
        if "cache" in result:
            c = result["cache"]
            looked = c["hits"] + c["misses"]
            case.facts["cache"] = (
                f"hit rate {c['hits'] / looked:.0%}, {c['requests']} GETs, "
                f"peak {c['peak_bytes'] / 1e6:.0f} of {c['max_bytes'] / 1e6:.0f} MB"
            )
        return images / result["seconds"]

    return measure


def run_child(
    spec: dict[str, Any], relay: Relay | None, weed_pid: int
) -> tuple[dict[str, Any], dict[str, float]]:
    """Run one row in a fresh process; returns its result and the counters around its epoch."""
    marks: dict[str, dict[str, float]] = {}

    def on_mark(name: str) -> None:
        marks[name] = {"cpu": harness.cpu_seconds(weed_pid), **(relay.counters() if relay else {})}

    command = [sys.executable, str(HERE / "w6_systems.py"), json.dumps(spec)]
    result, _, code = harness.run_child(
        command, peer_env(spec), HERE.parents[1], CHILD_TIMEOUT, on_mark
    )
    if result is None or set(marks) != {"start", "epoch"}:
        raise RuntimeError(f"the {spec['system']} child ended with code {code}")
    start, end = marks["start"], marks["epoch"]
    return result, {k: end[k] - start[k] for k in end}


# -- targets ----------------------------------------------------------------------------
def targets(cases: list[Case]) -> list[dict[str, Any]]:
    """The issue's targets, on the +20 ms rows, against the best peer of each measure."""
    mine = [c for c in cases if c.workload == "W6" and c.values and c.system.startswith("+20")]
    peers = [c for c in mine if c.group in ("webdataset", "litdata", "mosaic")]
    ours = {c.system: c for c in mine if c.group == "aioloader"}
    if not peers or not ours:
        return []

    def median(c: Case) -> float:
        return float(statistics.median(c.values))

    def pick(word: str) -> Case | None:
        """The fastest of our rows in a mode ("global shuffle" or "block shuffle")."""
        found = [c for name, c in ours.items() if word in name]
        return max(found, key=median) if found else None

    best = max(peers, key=median)
    out = []
    for label, case, bound in (
        ("block shuffle", pick("block shuffle"), 1.2),
        ("global shuffle", pick("global shuffle"), 1.0),
    ):
        if case is None:
            out.append(
                {
                    "target": f"W6: {label} images/s >= {bound}x best peer",
                    "measured": "n/a (row missing)",
                    "met": None,
                }
            )
            continue
        value = median(case) / median(best)
        out.append(
            {
                "target": f"W6: {label} images/s >= {bound}x best peer",
                "measured": f"{value:.2f}x ({median(case):,.0f} vs {best.system} "
                f"{median(best):,.0f})",
                "met": value >= bound,
            }
        )
    global_row = pick("global shuffle")
    block_row = pick("block shuffle")
    for fact, bound, label in (
        ("first batch s", 0.6, "first batch <= 0.6x best peer"),
        ("first batch after resume at 75% s", 0.4, "first batch after resume <= 0.4x best peer"),
    ):
        # a resume is compared with the peers that have one (WebDataset replays)
        pool = [c for c in peers if c.group != "webdataset"] if "resume" in fact else peers
        if not pool:
            continue
        best_peer = min(pool, key=lambda c: c.facts.get(fact, float("inf")))
        for case in (global_row, block_row):
            if case is None or fact not in case.facts:
                continue
            value = case.facts[fact] / best_peer.facts[fact]
            out.append(
                {
                    "target": f"W6: {case.system.split(': ', 1)[1]}: {label}",
                    "measured": f"{value:.2f}x ({case.facts[fact]:.2f} s vs {best_peer.system} "
                    f"{best_peer.facts[fact]:.2f} s)",
                    "met": value <= bound,
                }
            )
    requests_peer = min(peers, key=lambda c: c.facts.get("requests/epoch", float("inf")))
    for case in (global_row, block_row):
        if case is None:
            continue
        cpu = case.facts.get("S3 CPU-s per 1k images")
        out.append(
            {
                "target": f"W6: {case.system.split(': ', 1)[1]}: S3 CPU <= 0.15 s per 1k images",
                "measured": f"{cpu:.3f} s" if cpu is not None else "n/a",
                "met": None if cpu is None else cpu <= 0.15,
            }
        )
        if case is block_row:
            n = case.facts.get("requests/epoch")
            shards = case.facts.get("shards")
            out.append(
                {
                    "target": "W6: block shuffle requests/epoch <= 1.5x the number of shards",
                    "measured": f"{n} requests for {shards} shards"
                    + (f" ({n / shards:.2f}x)" if n and shards else "")
                    + f"; fewest of the peers: {requests_peer.system} "
                    f"{requests_peer.facts.get('requests/epoch')}",
                    "met": None if n is None or not shards else n <= 1.5 * shards,
                }
            )
    return out


# -- the workload, as run.py crosses it -----------------------------------------------------
NAME = "W6"
OPT_IN = True  # minutes; LitData and Mosaic installed by hand
TITLE = (
    "4,096 JPEGs (40-100 KB) from SeaweedFS: Pillow decode, resize 224, normalise, "
    "batch 64; cold epoch"
)
NOTES = [
    "Each row runs in a fresh process per round with empty local caches: one cold epoch "
    "(loader construction included), then a fresh loader resumed at 75% of the epoch. "
    "Ratios: each row against WebDataset with 2 workers on the same path. Requests and "
    "bytes are counted by the relay (+20 ms rows only); S3 CPU is the SeaweedFS "
    "process's utime + stime over the epoch. Sample 17's tensor equals preprocess() of "
    "its JPEG in every row (checked in every round, the warm-up included). WebDataset "
    "has no resume: its row rebuilds the pipeline and skips 75% of each worker's samples "
    "before decoding (still downloading them), in a different order.",
]


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W6's cases and notes (left out, and said so, without weed, Pillow or obstore)."""
    cfg = W6Config(images=512, direct=False) if quick else W6Config()
    log("W6: generating JPEGs and formats (cached), starting SeaweedFS and the relay")
    if not harness.can_run("W6", ("obstore", "PIL"), log, weed=True):
        return [], ["Left out: SeaweedFS (`weed`), Pillow or obstore is missing."]
    return cases(cfg, log, stack), NOTES + ([f"Quick run: {cfg}."] if quick else [])
