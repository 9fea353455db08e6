"""W6: ImageNet-like JPEGs from object storage against LitData, MosaicML Streaming, WebDataset.

``w6_data``'s JPEGs in each system's own format on SeaweedFS, read through the +20 ms relay
and directly. Each row runs once a round in a fresh child process (``run``: ``python
benchmarks/workloads/w6_object_storage.py SPEC_JSON``). docs/benchmarks.md (W6) says more.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _path in (HERE.parent, HERE.parents[1]):  # harness, systems, workloads; tests._support
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import harness  # noqa: E402
import numpy as np  # noqa: E402
from harness import Case  # noqa: E402
from storage import Relay, start  # noqa: E402
from systems import aioloader as aioloader_system  # noqa: E402
from systems import webdataset  # noqa: E402
from systems.s3spec import peer_env  # noqa: E402

from aioloader.core import shard_pieces  # noqa: E402
from workloads import w6_data  # noqa: E402

harness.use_peer_paths()  # $AIOLOADER_BENCH_PEERS, set by run.py --peer-path (the children)

NAME = "W6"
OPT_IN = True  # minutes; LitData and Mosaic installed by hand
TITLE = (
    "4,096 JPEGs (40-100 KB) from SeaweedFS: Pillow decode, resize 224, normalise, "
    "batch 64; cold epoch"
)
NOTES = [
    "Each row runs in a fresh process per round with empty local caches: one cold epoch "
    "(loader construction included), then a fresh loader resumed at 75% of the epoch. "
    "Ratios: against WebDataset with 2 workers on the same path. Requests and bytes are "
    "counted by the relay (+20 ms rows only); S3 CPU is SeaweedFS's utime + stime over the "
    "epoch. Sample 17's tensor equals preprocess() of its JPEG in every row and round. "
    "WebDataset has no resume: its row rebuilds the pipeline and skips 75% of each worker's "
    "samples before decoding (still downloading them), in a different order.",
]
PROBE = 17  # the sample whose tensor every system must produce bit for bit
PEER_NOTES = {
    "webdataset": "WebDataset(shardshuffle).shuffle(1000).map.batched(64), torch DataLoader, "
    "presigned URLs",
    "litdata": "StreamingDataset(shuffle=True, transform) + StreamingDataLoader",
    "mosaic": "StreamingDataset subclass + StreamingDataLoader, worker_init_fn drops the "
    "inherited boto3 client",
}


@dataclasses.dataclass(frozen=True)
class W6Config:
    images: int = 4096
    batch: int = 64
    seed: int = 2026
    workers: int = 2
    inflight: int = 256
    direct: bool = True  # also read without the relay
    # None: tars of 256 samples, LitData and MDS chunks of 64 MB (the repository's
    # configuration); else every format in shards of this many bytes (tars: one sample more)
    shard_bytes: int | None = None
    on_the_fly: bool = True  # also the rows that build their index on the fly
    workload: str = "W6"  # the table its rows go to (W6L: W6 at shards of 64 MB)
    # with a number: the block-shuffle rows again, over pieces of this many samples
    # (``shard_pieces``): the configuration for shards larger than the cache
    piece: int | None = None


GLOBAL_CACHED = "aioloader global shuffle + known-future cache (25%)"
BLOCK_CACHED = "aioloader block shuffle + known-future cache (25%)"
PIECES_CACHED = "aioloader block shuffle over pieces + known-future cache (25%)"
BLOCK_LABELS = {BLOCK_CACHED: "block shuffle + cache", PIECES_CACHED: "block over pieces + cache"}
PEERS = ("litdata", "mosaic")  # the formats written besides the tars
FORMAT = {"litdata": "litdata", "mosaic": "mds"}  # each peer's format (the others read tars)


def rows(
    cfg: W6Config, relayed: bool, keys: list[str], index: str, size: int
) -> list[tuple[str, dict[str, Any]]]:
    """``(name, spec)`` of every row on the +20 ms path (``relayed``), or the direct one."""
    w, r = cfg.workers, cfg.inflight
    aio = {"system": "aioloader", "inflight": r, "keys": keys, "index_dir": index}
    fly, block = {**aio, "index_dir": None}, {"sampler": "block", "window": 4}
    cached = {"cache_fraction": 0.25, "dataset_bytes": size}
    out: list[tuple[str, dict[str, Any]]] = [
        (f"WebDataset, {w} workers", {"system": "webdataset", "keys": keys}),
        (f"LitData, {w} workers", {"system": "litdata", "prefix": "litdata"}),
        (f"MosaicML Streaming, {w} workers", {"system": "mosaic", "prefix": "mds"}),
        (f"aioloader TarShards, global shuffle, {w} threads, {r} reads in flight", aio),
        ("aioloader TarShards, index built on the fly", fly),
        (GLOBAL_CACHED, {**aio, **cached}),
        ("aioloader TarShards, block shuffle (window 4 shards)", {**aio, **block}),
        (BLOCK_CACHED, {**aio, **block, **cached}),
        ("aioloader block shuffle + cache, index built on the fly", {**fly, **block, **cached}),
    ]
    if cfg.piece is not None:
        pieces = {**block, "piece": cfg.piece}
        out += [
            (
                f"aioloader TarShards, block shuffle (window 4 pieces of {cfg.piece})",
                {**aio, **pieces},
            ),
            (PIECES_CACHED, {**aio, **pieces, **cached}),
        ]
    if not cfg.on_the_fly or not relayed:
        out = [(name, spec) for name, spec in out if spec.get("index_dir", "") is not None]
    # read directly: the peers, and aioloader's two shuffles with a saved index and no cache
    return out if relayed else [(name, spec) for name, spec in out if "cache_fraction" not in spec]


def note(spec: dict[str, Any]) -> str:
    if spec["system"] != "aioloader":
        return PEER_NOTES[spec["system"]]
    index = "prebuilt index" if spec["index_dir"] else "index built on the fly"
    sampler = "BlockShuffledSampler(window=4)" if spec.get("sampler") else "ShuffledSampler"
    if spec.get("piece"):
        sampler = f"BlockShuffledSampler(shard_pieces(shard_sizes, {spec['piece']}), window=4)"
    cache = " + KnownFutureCache(25% of the data)" if spec.get("cache_fraction") else ""
    return f"TarShards ({index}) + {sampler}{cache}, DataLoader(workers=2), uvloop"


def cases(cfg: W6Config, log: Callable[[str], None], stack: contextlib.ExitStack) -> list[Case]:
    """Prepare the data, start the server and the relay (stopped by ``stack``), build rows."""
    root = w6_data.cache_dir(cfg.images, cfg.seed)
    log(f"  {cfg.workload}: images and formats under {root} (generated once)")
    folder = w6_data.generate(root, cfg.images, cfg.seed)
    if cfg.shard_bytes is None:
        formats = w6_data.write_formats(folder, cfg.images, root, 256, ("64MB", 64 * 2**20), PEERS)
    else:
        n = cfg.shard_bytes
        where = root / f"w6-shards-of-{n}-bytes"
        formats = w6_data.write_formats(folder, cfg.images, where, cfg.images, (n, n), PEERS, n)
    others: dict[str, Path] = {k: formats[k] for k in ("litdata", "mds") if k in formats}
    rig = start(stack, f"{cfg.workload.lower()}-bench", ("wds", formats["tar"]), others)
    shards = {k: w6_data.shard_files(formats[k]) for k in ("tar", *others)}
    sizes = {k: sum(p.stat().st_size for p in files) for k, files in shards.items()}
    told = "; ".join(f"{k}: {len(shards[k])} shards, {sizes[k]:,} bytes" for k in shards)
    log(f"  {cfg.workload}: uploaded {told}")
    pieces = None
    if cfg.piece is not None:
        counts = [_samples_in(path) for path in shards["tar"]]
        pieces = len(shard_pieces(counts, cfg.piece))
        log(f"  {cfg.workload}: {pieces} pieces of at most {cfg.piece} samples")
    probe = w6_data.preprocess(w6_data.read_jpeg(folder, PROBE))
    reference = hashlib.sha256(probe.tobytes()).hexdigest()
    common = {
        **{k: getattr(cfg, k) for k in ("images", "batch", "seed", "workers")},
        "scratch": str(Path(tempfile.gettempdir()) / f"aioloader-w6-run-{os.getpid()}"),
    }
    size = w6_data.dataset_bytes(folder)
    out = []
    for path in ("+20 ms", "direct") if cfg.direct else ("+20 ms",):
        relay = rig.relay if path == "+20 ms" else None
        reach = rig.spec(relay.endpoint if relay else rig.info.endpoint)
        for name, row in rows(cfg, relay is not None, rig.keys, rig.index_dir, size):
            spec = {**common, **row, **reach}
            case = w6_data.case(cfg.workload, f"{path}: {name}", spec, note(spec), "images/s")
            case.compare_to = f"{path}: WebDataset, {cfg.workers} workers"
            case.baseline = case.system == "+20 ms: WebDataset, 2 workers"
            case.facts["shards"] = len(shards.get(FORMAT.get(spec["system"], "tar"), []))
            if spec.get("piece"):
                case.facts["pieces"] = pieces
            if case.error is None:
                case.measure = _measure(case, spec, relay, rig.weed_pid, reference)
            out.append(case)
    return out


def _samples_in(path: Path) -> int:
    """Samples in a WebDataset tar: its distinct member names less their extensions."""
    with tarfile.open(path) as archive:
        return len({name.split(".", 1)[0] for name in archive.getnames()})


def _measure(
    case: Case, spec: dict[str, Any], relay: Relay | None, weed_pid: int, reference: str
) -> Callable[[], float]:
    images = spec["images"]
    runs: dict[str, list[Any]] = {}

    def measure() -> float:
        marks: dict[str, dict[str, float]] = {}  # the relay's and the server's counters

        def on_mark(name: str) -> None:
            counters = relay.counters() if relay else {}
            marks[name] = {"cpu": harness.cpu_seconds(weed_pid), **counters}

        command = [sys.executable, str(HERE / "w6_object_storage.py"), json.dumps(spec)]
        result, _, code = harness.run_child(command, peer_env(spec), HERE.parents[1], 600, on_mark)
        if result is None or set(marks) != {"start", "epoch"}:
            raise RuntimeError(f"the {spec['system']} child ended with code {code}")
        counted = {k: marks["epoch"][k] - marks["start"][k] for k in marks["epoch"]}
        if result["probe"] != reference:
            raise AssertionError(
                f"sample 17's tensor differs from preprocess() of its JPEG "
                f"({result['probe']} != {reference})"
            )
        whole = images // spec["batch"]
        # WebDataset batches within each worker: one partial batch a worker at most
        most = whole + (spec["workers"] if spec["system"] == "webdataset" else 0)
        if not whole <= result["batches"] <= most:
            raise AssertionError(f"{result['batches']} batches, not {whole} (at most {most})")
        values = {
            "first batch s": result["first_batch"],
            "first batch after resume at 75% s": result["resume_first_batch"],
            "S3 CPU-s per 1k images": counted["cpu"] / images * 1000,
            "local disk MB": result["disk_bytes"] / 1e6,
        }
        if relay is not None:
            values["requests/epoch"] = counted["requests"]
            values["MB fetched/epoch"] = counted["bytes_to_client"] / 1e6
        for key, value in values.items():  # each fact: the median over the rounds
            runs.setdefault(key, []).append(value)
            median = statistics.median(runs[key])
            case.facts[key] = round(median) if key == "requests/epoch" else median
        once = runs.setdefault("exactly once", [])
        once.append(result["exactly_once"])
        case.facts["exactly once"] = once[-1] if len(set(once)) == 1 else "; ".join(once)
        case.facts["resume"] = result["resume_how"]
        if "cache" in result:
            c = result["cache"]
            case.facts["cache"] = (
                f"hit rate {c['hits'] / (c['hits'] + c['misses']):.0%}, {c['requests']} GETs, "
                f"peak {c['peak_bytes'] / 1e6:.0f} of {c['max_bytes'] / 1e6:.0f} MB"
            )
        return float(images / result["seconds"])

    return measure


def targets(cases: list[Case], workload: str = "W6") -> list[dict[str, Any]]:
    """Issue 35's targets on the +20 ms rows of ``workload`` (W6, W6L), each against the best
    peer of its measure: images/s (block shuffle + cache >= 1.2x, the faster global shuffle
    row >= 1.0x), first batch cold and after resume at 75% (both cached rows <= 0.6x), S3
    CPU per 1,000 images (every aioloader row <= the lowest peer's); and block + cache
    requests <= 1.5x the shards (issue 25)."""
    mine = [c for c in cases if c.workload == workload and c.values and c.system.startswith("+20")]
    peers = [c for c in mine if c.group != "aioloader"]
    ours = {c.system.split(": ", 1)[1]: c for c in mine if c.group == "aioloader"}
    if not peers or not ours:
        return []
    best = max(peers, key=_median)
    global_rows = [c for name, c in ours.items() if "global shuffle" in name]
    fastest_global = max(global_rows, key=_median, default=None)
    blocks = {name: ours[name] for name in (BLOCK_CACHED, PIECES_CACHED) if name in ours}
    out = [
        harness.target(
            f"{workload}: {BLOCK_LABELS[name]} images/s >= 1.2x best peer", case, best, 1.2
        )
        for name, case in blocks.items()
    ]
    out.append(
        harness.target(
            f"{workload}: global shuffle images/s >= 1.0x best peer", fastest_global, best, 1.0
        )
    )
    cached = {name: ours.get(name) for name in (GLOBAL_CACHED, *blocks)}
    for fact, label in (
        ("first batch s", "first batch"),
        ("first batch after resume at 75% s", "first batch after resume at 75%"),
    ):  # a resume is compared with the peers that have one (WebDataset replays)
        pool = [c for c in peers if fact in c.facts]
        pool = [c for c in pool if "resume" not in fact or c.group != "webdataset"]
        peer = min(pool, key=lambda c: c.facts[fact], default=None)
        for name, case in cached.items():
            text = f"{workload}: {name}: {label} <= 0.6x best peer"
            out.append(_fact_ratio(text, case, peer, fact, "s", 0.6))
    cpu = "S3 CPU-s per 1k images"
    lowest = min((c for c in peers if cpu in c.facts), key=lambda c: c.facts[cpu], default=None)
    for name, case in ours.items():
        text = f"{workload}: {name}: S3 CPU per 1,000 images <= best peer's"
        out.append(_fact_ratio(text, case, lowest, cpu, "s", 1.0))
    for name, case in blocks.items():
        pieces = None if name == BLOCK_CACHED else case.facts.get("pieces")
        out.append(_requests_target(f"{workload}: {BLOCK_LABELS[name]}", case, peers, pieces))
    return out


def _median(case: Case) -> float:
    return harness.median(case) or 0.0


def _fact_ratio(
    text: str, case: Case | None, peer: Case | None, fact: str, unit: str, bound: float
) -> dict[str, Any]:
    """The target ``case.facts[fact] / peer.facts[fact] <= bound`` (lower is better)."""
    if case is None or peer is None or fact not in case.facts or not peer.facts.get(fact):
        return harness.fact_target(text, "n/a (a row or its figure is missing)", None)
    mine, theirs = case.facts[fact], peer.facts[fact]
    measured = f"{mine / theirs:.2f}x ({mine:.3g} {unit} vs {peer.system} {theirs:.3g} {unit})"
    return harness.fact_target(text, measured, mine / theirs <= bound)


def _requests_target(
    name: str, block: Case | None, peers: list[Case], pieces: int | None = None
) -> dict[str, Any]:
    """Block shuffle + cache: requests per epoch <= 1.5x the number of shards (of pieces,
    for the rows over pieces: each piece is one contiguous range)."""
    unit = "shards" if pieces is None else "pieces"
    text = f"{name} requests/epoch <= 1.5x the number of {unit}"
    if block is None:
        return harness.fact_target(text, "n/a (row missing)", None)
    n = block.facts.get("requests/epoch")
    shards = block.facts.get("shards") if pieces is None else pieces
    measured = f"{n} requests for {shards} {unit}"
    measured += f" ({n / shards:.2f}x)" if n and shards else ""
    fewest = min(peers, key=lambda c: c.facts.get("requests/epoch", float("inf")))
    measured += f"; fewest of the peers: {fewest.system} {fewest.facts.get('requests/epoch')}"
    return harness.fact_target(
        text, measured, None if n is None or not shards else n <= 1.5 * shards
    )


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W6's cases and notes (left out, and said so, without weed, Pillow or obstore)."""
    cfg = W6Config(images=512, direct=False) if quick else W6Config()
    return build_config(cfg, quick, log, stack)


def build_config(cfg: W6Config, quick: bool, log: Callable[[str], None], stack: Any) -> Any:
    """The cases and notes of ``cfg`` (W6's, or W6L's)."""
    log(f"{cfg.workload}: generating JPEGs and formats (cached), starting SeaweedFS and the relay")
    if not harness.can_run(cfg.workload, ("obstore", "PIL"), log, weed=True):
        return [], ["Left out: SeaweedFS (`weed`), Pillow or obstore is missing."]
    return cases(cfg, log, stack), NOTES + ([f"Quick run: {cfg}."] if quick else [])


# -- the child: one row, once: a cold epoch, then a resume at 75% ------------------------------
class Epoch:
    """Takes batches: first-batch time, ids, the probe's digest, the loader's state at 75%."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.resume_step = spec["images"] // spec["batch"] * 3 // 4
        self.started = time.perf_counter()
        self.first: float | None = None
        self.ids: list[int] = []
        self.probe: str | None = None
        self.state: Any = None
        self.batches = 0

    def take(self, batch: dict[str, Any], loader: Any = None) -> None:
        if self.first is None:
            self.first = time.perf_counter() - self.started
        ids = [int(i) for i in batch["id"]]
        self.ids.extend(ids)
        self.batches += 1
        if PROBE in ids:
            image = np.ascontiguousarray(np.asarray(batch["image"][ids.index(PROBE)]))
            self.probe = hashlib.sha256(image.tobytes()).hexdigest()
        if loader is not None and self.batches == self.resume_step:
            self.state = loader.state_dict()


def aioloader_parts(spec: dict[str, Any]) -> tuple[Any, Any]:
    """``(TarShards, DataLoader)`` of an aioloader row."""
    cache = None
    if spec.get("cache_fraction"):
        from aioloader import KnownFutureCache

        cache = KnownFutureCache(max_bytes=int(spec["dataset_bytes"] * spec["cache_fraction"]))
    return aioloader_system.tar_loader(spec, w6_data.work, w6_data.collate_items, cache)


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """The row ``spec``'s cold epoch and resume; the parent reads counters at the marks."""
    system, scratch = spec["system"], Path(spec["scratch"])
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    steps = spec["images"] // spec["batch"]
    result: dict[str, Any] = {}
    harness.child_mark("start")
    epoch = Epoch(spec)
    if system == "webdataset":
        for batch in webdataset.batches(spec, w6_data.work, w6_data.collate_items):
            epoch.take(batch)
    elif system in ("litdata", "mosaic"):
        loader = w6_data.peer_loader(spec, scratch / "cache")
        for batch in loader:
            epoch.take(batch, loader)
        del loader
    else:

        async def consume() -> None:
            shards, loader = aioloader_parts(spec)
            async with loader.stream(None, steps) as stream:  # moves the cursor: state_dict
                async for batch in stream:
                    epoch.take(batch, loader)
            if shards.cache is not None:
                result["cache"] = w6_data.cache_statistics(shards)

        aioloader_system.run_async(consume)
    seconds = time.perf_counter() - epoch.started
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
    )
    result["resume_first_batch"], result["resume_how"] = _resume(spec, epoch)
    shutil.rmtree(scratch, ignore_errors=True)
    return result


def _resume(spec: dict[str, Any], epoch: Epoch) -> tuple[float, str]:
    """Seconds to the first batch after resuming at 75%, and how the system resumes."""
    system = spec["system"]
    started = time.perf_counter()
    if system == "webdataset":
        skip = epoch.resume_step * spec["batch"]
        batches = webdataset.batches(spec, w6_data.work, w6_data.collate_items, skip=skip)
        how = "no resume: rebuilt, skipped 75% (downloaded)"
    elif system in ("litdata", "mosaic"):
        if epoch.state is None:
            raise RuntimeError(f"{system}: no state_dict was taken at step {epoch.resume_step}")
        batches = w6_data.peer_loader(spec, Path(spec["scratch"]) / "cache")
        batches.load_state_dict(epoch.state)
        how = "StreamingDataLoader.load_state_dict"
    else:

        async def first_batch() -> float:
            _, loader = aioloader_parts(spec)
            if epoch.state is None or epoch.state["next_step"] != epoch.resume_step:
                raise RuntimeError(f"aioloader: the state taken is not at {epoch.resume_step}")
            loader.load_state_dict(epoch.state)
            async for _ in loader:
                return time.perf_counter() - started
            raise RuntimeError("aioloader gave no batch after resuming")

        return aioloader_system.run_async(first_batch), "DataLoader.load_state_dict"
    for _ in batches:
        return time.perf_counter() - started, how
    raise RuntimeError(f"{system} gave no batch after resuming")


if __name__ == "__main__":
    harness.child_main(run)
