"""W8: multi-epoch training with a cache smaller than the dataset (issues 20, 25 and 35).

W6's JPEGs in tar shards of 32 and of 128 samples (the peers' formats cut into chunks of the
same bytes), read through the +20 ms relay for three epochs on one loader with a cache of
25% and 50% of the dataset, beside the same loader without a cache and the peers; the relay
counts bytes and requests per epoch, against the known optimum ``dataset - cache``, and the
S3 server's CPU per epoch (docs/benchmarks.md, W8). ``python benchmarks/workloads/w8_cache.py
SPEC_JSON`` runs one row (the child).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import zlib
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
from storage import Rig, start  # noqa: E402
from systems import aioloader as aioloader_system  # noqa: E402
from systems import webdataset  # noqa: E402
from systems.s3spec import peer_env  # noqa: E402

from workloads import w6_data  # noqa: E402

harness.use_peer_paths()  # $AIOLOADER_BENCH_PEERS, set by run.py --peer-path (the children)

ANCHORS = (0, 17, 1000, 4095)  # samples whose tensors the parent computes itself
NAME = "W8"
OPT_IN = True  # many minutes
SHARD_SAMPLES = (32, 128)  # samples per tar shard: 128 and 32 shards of 4,096 images
PEERS = ("litdata", "mosaic", "webdataset")
TIERS = ("memory", "disk")
LEAVE_OUT = (*PEERS, *TIERS)  # what --w8-leave-out may name
SAMPLERS = {"block": "BlockShuffledSampler(window=4)", "global": "ShuffledSampler"}
PEER_LABELS = {
    "litdata": ("LitData", "max_cache_size"),
    "mosaic": ("MosaicML Streaming", "cache_limit"),
}
FORMATS = {"litdata": "litdata", "mosaic": "mds"}  # a peer's own format (the others: tars)
TITLE = (
    "three epochs with a cache of 25% and 50% of the dataset, and without: W6's JPEGs in tar "
    "shards of 32 and of 128 samples (the peers' chunks of the same bytes) from SeaweedFS, "
    "+20 ms per request; speed, bytes, requests and S3 CPU per epoch"
)
NOTES = [
    "Bytes and requests are counted at the relay in front of SeaweedFS, per epoch (the child "
    "pauses at each boundary); 'eN S3 CPU-s/1k images' is SeaweedFS's utime + stime over the "
    "epoch per 1,000 images. Every system iterates one epoch a loop. The cache budget bounds "
    "all a system holds (aioloader's disk rows: a quarter in memory for read-ahead, the rest on "
    "disk). 'eN / optimum' divides epoch N's bytes by dataset - cache (no policy fetches less; "
    "without a cache: the dataset), 'e1 / dataset' by the system's stored bytes, 'all epochs / "
    "optimum' all epochs' bytes by dataset + (epochs - 1) x optimum. Every epoch of every row "
    "delivered each sample once and the same tensor per sample (CRC-32, anchored by "
    "preprocess() in the parent). Each round runs every row once (rows interleaved); the speed "
    "is epochs 2-3 together (samples / seconds), and every per-epoch figure is the median over "
    "the rounds. Ratios: aioloader's rows against the best peer of their shard size and cache "
    "(WebDataset, without a cache, counts at every cache), the peers' against WebDataset.",
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
    shard_samples: tuple[int, ...] = SHARD_SAMPLES  # tars of this many samples, one set each
    tiers: tuple[str, ...] = TIERS  # aioloader's cache tiers
    peers: tuple[str, ...] = PEERS
    no_cache: bool = True  # aioloader without a cache too, each sampler (what a cache must beat)
    row_timeout: float = 600.0  # seconds for all epochs of one row (Mosaic may thrash)

    def __post_init__(self) -> None:
        for name in ("images", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"W8Config.{name} must be >= 1 but got {getattr(self, name)}")
        if self.epochs < 2:
            raise ValueError(
                f"W8Config.epochs must be >= 2 (W8 measures the epochs after the first) "
                f"but got {self.epochs}"
            )
        if not self.shard_samples or min(self.shard_samples) < 1:
            raise ValueError(
                f"W8Config.shard_samples must be sizes >= 1 but got {self.shard_samples}"
            )
        if self.images % self.batch or any(self.images % s for s in self.shard_samples):
            raise ValueError(
                f"W8Config.images must be a multiple of batch ({self.batch}) and of every "
                f"shard size {self.shard_samples} so that every epoch is whole batches and "
                f"shards but got {self.images}"
            )
        for name, known in (("tiers", TIERS), ("peers", PEERS)):
            unknown = [x for x in getattr(self, name) if x not in known]
            if unknown or (name == "tiers" and not self.tiers):
                raise ValueError(
                    f"W8Config.{name} must be one or more of {known} but got {getattr(self, name)}"
                )

    def left_out(self) -> list[str]:
        """The peers and tiers this configuration does not run."""
        return [x for x in LEAVE_OUT if x not in (*self.tiers, *self.peers)]


def shard_samples_option(text: str) -> tuple[int, ...]:
    """``--w8-shard-samples``: comma-separated samples per tar shard, such as ``32,128``."""
    try:
        sizes = tuple(dict.fromkeys(int(part) for part in text.split(",") if part.strip()))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(
            f"--w8-shard-samples must be comma-separated integers >= 1, such as 32,128, "
            f"but got {text!r}"
        )
    return sizes


def leave_out_option(text: str) -> tuple[str, ...]:
    """``--w8-leave-out``: comma-separated peers and tiers W8 does not run."""
    names = tuple(dict.fromkeys(p.strip().lower() for p in text.split(",") if p.strip()))
    if not names or any(n not in LEAVE_OUT for n in names) or set(TIERS) <= set(names):
        raise argparse.ArgumentTypeError(
            f"--w8-leave-out must name some of {', '.join(LEAVE_OUT)} (not both tiers) "
            f"but got {text!r}"
        )
    return names


def config(quick: bool, args: Any) -> W8Config:
    """The run's settings: ``--w8-images``, ``--w8-shard-samples``, ``--w8-leave-out`` (quick:
    512 images in shards of 32 unless told, no peers)."""
    leave = getattr(args, "w8_leave_out", None) or ()
    tiers = tuple(t for t in TIERS if t not in leave)
    peers = () if quick else tuple(p for p in PEERS if p not in leave)
    sizes = getattr(args, "w8_shard_samples", None) or ((32,) if quick else SHARD_SAMPLES)
    images = 512 if quick else getattr(args, "w8_images", None) or 4096
    return W8Config(images=images, shard_samples=sizes, tiers=tiers, peers=peers)


def metric(epochs: int) -> str:
    return "epoch 2 images/s" if epochs == 2 else f"epochs 2-{epochs} images/s"


# -- the rows' names (the targets find rows by them) ------------------------------------------
def ours_name(samples: int, fraction: float | None, tier: str, sampler: str) -> str:
    cache = "no cache" if fraction is None else f"{tier} tier {fraction:.0%}"
    return f"shards of {samples}: aioloader {cache}, {SAMPLERS[sampler]}"


def peer_name(samples: int, system: str, fraction: float | None) -> str:
    if system == "webdataset":
        return f"shards of {samples}: WebDataset, no cache"
    label, limit = PEER_LABELS[system]
    return f"shards of {samples}: {label} {limit} {fraction:.0%}"


# -- the byte accounting ------------------------------------------------------------------
def cache_bytes(fraction: float, dataset_bytes: int) -> int:
    return int(fraction * dataset_bytes)


def optimum_bytes(fraction: float, dataset_bytes: int) -> int:
    """Fewest bytes any policy fetches in an epoch after the first: dataset - cache."""
    return dataset_bytes - cache_bytes(fraction, dataset_bytes)


def epoch_facts(
    epochs: list[dict[str, float]], dataset_bytes: int, fraction: float | None
) -> dict[str, Any]:
    """A row's cells from each epoch's ``bytes``, ``requests``, ``images_per_s`` and, where
    counted, ``cpu_per_1k`` (``fraction`` None: no cache, the optimum is the whole dataset)."""
    optimum = dataset_bytes if fraction is None else optimum_bytes(fraction, dataset_bytes)
    facts: dict[str, Any] = {
        "dataset MB": dataset_bytes / 1e6,
        "cache MB": 0.0 if fraction is None else cache_bytes(fraction, dataset_bytes) / 1e6,
        "optimum MB (epochs 2+)": optimum / 1e6,
    }
    for n, epoch in enumerate(epochs, 1):
        facts[f"e{n} MB"] = epoch["bytes"] / 1e6
        facts[f"e{n} requests"] = round(epoch["requests"])
        facts[f"e{n} images/s"] = epoch["images_per_s"]
        key, whole = ("e1 / dataset", dataset_bytes) if n == 1 else (f"e{n} / optimum", optimum)
        facts[key] = round(epoch["bytes"] / whole, 3)
        if "cpu_per_1k" in epoch:
            facts[f"e{n} S3 CPU-s/1k images"] = epoch["cpu_per_1k"]
    if epochs:  # read-ahead may cross an epoch boundary; the total cannot be misattributed
        fewest = dataset_bytes + (len(epochs) - 1) * optimum
        facts["all epochs / optimum"] = round(sum(e["bytes"] for e in epochs) / fewest, 3)
    return facts


def per_epoch(marks: list[dict[str, float]], images: int) -> list[dict[str, float]]:
    """Counters between consecutive marks: each epoch's bytes, requests, seconds, images/s
    and, where the marks hold the S3 server's ``cpu`` seconds, its CPU per 1,000 images."""
    out = []
    for before, after in itertools.pairwise(marks):
        seconds = after["time"] - before["time"]
        epoch = {
            "bytes": after["bytes_to_client"] - before["bytes_to_client"],
            "requests": after["requests"] - before["requests"],
            "seconds": seconds,
            "images_per_s": images / seconds,
        }
        if "cpu" in before and "cpu" in after:
            epoch["cpu_per_1k"] = (after["cpu"] - before["cpu"]) / images * 1000
        out.append(epoch)
    return out


def median_epochs(rounds: list[list[dict[str, float]]]) -> list[dict[str, float]]:
    """Epoch by epoch, each figure's median over the rounds (all of the same epochs)."""
    return [
        {key: statistics.median(epoch[key] for epoch in same) for key in same[0]}
        for same in zip(*rounds, strict=True)
    ]


def later_speed(epochs: list[dict[str, float]], images: int) -> float:
    """Images/s over the epochs after the first, together."""
    return images * (len(epochs) - 1) / sum(e["seconds"] for e in epochs[1:])


# -- the parent ---------------------------------------------------------------------------
def prepare(cfg: W8Config, samples: int, log: Callable[[str], None]) -> dict[str, Path]:
    """The images (W6's, cached) and every format at shards of ``samples``; the folders."""
    root = w6_data.cache_dir(cfg.images, cfg.seed)
    folder = w6_data.generate(root, cfg.images, cfg.seed)
    log(f"  W8: images and formats (shards of {samples}) under {root}")
    chunk = -(-w6_data.dataset_bytes(folder) // (cfg.images // samples)) + 4096  # a tar shard
    out = root / f"w8-{samples}-per-shard"
    peers = [p for p in cfg.peers if p != "webdataset"]
    return w6_data.write_formats(folder, cfg.images, out, samples, (chunk, chunk), peers)


def rows(
    cfg: W8Config, samples: int, sizes: dict[str, int], keys: list[str], index_dir: str
) -> list[tuple[str, dict[str, Any], str]]:
    """``(name, spec, note)`` of every row at shards of ``samples``: aioloader without a cache,
    with one (tiers, fractions), then the peers."""

    def spec(system: str, fraction: float | None, stored: str, **extra: Any) -> dict[str, Any]:
        size = sizes.get(stored, 0)  # a format a missing peer could not write is never read
        cached = {} if fraction is None else {"cache_bytes": cache_bytes(fraction, size)}
        return {"system": system, "fraction": fraction, "dataset_bytes": size, **cached, **extra}

    tars = {"keys": keys, "index_dir": index_dir, "inflight": cfg.inflight}
    loader = f"DataLoader(workers={cfg.workers})"
    out = [
        (
            ours_name(samples, None, "", sampler),
            spec("aioloader", None, "tar", tier=None, sampler=sampler, **tars),
            f"TarShards (no cache), {label}, {loader}",
        )
        for sampler, label in SAMPLERS.items()
        if cfg.no_cache
    ]
    out += [
        (
            ours_name(samples, fraction, tier, sampler),
            spec("aioloader", fraction, "tar", tier=tier, sampler=sampler, **tars),
            f"TarShards(cache=KnownFutureCache, {tier} tier), {label}, {loader}",
        )
        for fraction in cfg.fractions
        for tier in cfg.tiers
        for sampler, label in SAMPLERS.items()
    ]
    for fraction in cfg.fractions:
        for system, prefix in (("mosaic", "mds"), ("litdata", "litdata")):
            if system in cfg.peers:
                note = "StreamingDataset(shuffle=True) + StreamingDataLoader, local disk"
                row = spec(system, fraction, prefix, prefix=f"{prefix}-{samples}")
                out.append((peer_name(samples, system, fraction), row, note))
    if "webdataset" in cfg.peers:
        note = "WebDataset(shardshuffle).shuffle(1000), torch DataLoader, presigned URLs"
        row = spec("webdataset", None, "tar", keys=keys)
        out.append((peer_name(samples, "webdataset", None), row, note))
    return out


def cases(cfg: W8Config, log: Callable[[str], None], stack: contextlib.ExitStack) -> list[Case]:
    """Prepare the data, start the server and the relay (stopped by ``stack``), build rows."""
    formats = {samples: prepare(cfg, samples, log) for samples in cfg.shard_samples}
    others = {
        f"{kind}-{samples}": found[kind]
        for samples, found in formats.items()
        for kind in ("mds", "litdata")
        if kind in found
    }
    first, *more = cfg.shard_samples
    rig = start(stack, "w8-bench", (f"tar-{first}", formats[first]["tar"]), others)
    tars = {first: (rig.keys, rig.index_dir)}
    tars.update({s: rig.add_tars(f"tar-{s}", formats[s]["tar"]) for s in more})
    jpegs = formats[first]["jpeg"]
    # sample -> CRC-32 of its tensor: anchored here by preprocess(), the rest as rows give them
    reference = {
        i: zlib.crc32(w6_data.preprocess(w6_data.read_jpeg(jpegs, i)).tobytes())
        for i in ANCHORS
        if i < cfg.images
    }
    common = {
        **rig.spec(rig.relay.endpoint),
        "scratch": str(Path(tempfile.gettempdir()) / f"aioloader-w8-run-{os.getpid()}"),
        **{k: getattr(cfg, k) for k in ("images", "batch", "seed", "epochs", "workers")},
    }
    out = []
    for samples in cfg.shard_samples:
        found = formats[samples]
        kinds = ("tar", "mds", "litdata")
        sizes: dict[str, int] = {k: w6_data.folder_bytes(found[k]) for k in kinds if k in found}
        keys, index_dir = tars[samples]
        log(
            f"  W8: {len(keys)} tar shards of {samples} ({sizes['tar']:,} bytes) and peers' formats"
        )
        for name, row, note in rows(cfg, samples, sizes, keys, index_dir):
            spec = {**common, **row}
            case = w6_data.case("W8", name, spec, note, metric(cfg.epochs))
            case.compare_to = peer_name(samples, "webdataset", None)
            case.facts["shard samples"] = samples
            kind = FORMATS.get(row["system"], "tar")
            case.facts["shards"] = len(w6_data.shard_files(found[kind])) if kind in found else 0
            if case.error is None:
                case.measure = _measure(case, spec, rig, reference, cfg)
            out.append(case)
    return out


def _check(
    reference: dict[int, int], row: str, number: int, samples: list[list[int]], images: int
) -> None:
    """Epoch ``number`` gave each id once, each with the tensor CRC seen everywhere else."""
    once = w6_data.exactly_once([i for i, _ in samples], images)
    if once != "yes":
        raise AssertionError(f"{row}: epoch {number} samples: {once}")
    for i, crc in samples:
        if crc != reference.setdefault(i, crc):
            raise AssertionError(
                f"{row}: epoch {number}: sample {i}'s tensor has CRC {crc:08x}, "
                f"not {reference[i]:08x} as elsewhere"
            )


def _measure(
    case: Case, spec: dict[str, Any], rig: Rig, reference: dict[int, int], cfg: W8Config
) -> Callable[[], float]:
    rounds: list[list[dict[str, float]]] = []  # the kept rounds' epochs
    calls = [0]

    def measure() -> float:
        calls[0] += 1
        checking = calls[0] == 1  # the warm-up round: one epoch, checked before any timing
        row = {**spec, "epochs": 1} if checking else spec
        marks: list[dict[str, float]] = []

        def on_mark(_: str) -> None:
            cpu = harness.cpu_seconds(rig.weed_pid)
            marks.append({**rig.relay.counters(), "cpu": cpu, "time": time.perf_counter()})

        command = [sys.executable, str(HERE / "w8_cache.py"), json.dumps(row)]
        result, timed_out, code = harness.run_child(
            command, peer_env(row), HERE.parents[1], cfg.row_timeout, on_mark
        )
        if result is None and not (timed_out and marks):
            raise RuntimeError(f"the {row['system']} child ended with code {code}")
        if result is None and checking:
            raise TimeoutError(f"the checking epoch took over {cfg.row_timeout:.0f} s")
        if result is None:  # timed out: the facts of the epochs done, then the error
            on_mark("")
            epochs = per_epoch(marks, cfg.images)
            case.facts.update(epoch_facts(epochs, spec["dataset_bytes"], spec["fraction"]))
            case.facts[f"e{len(epochs)} images/s"] = 0.0
            raise TimeoutError(
                f"epoch {len(epochs)} unfinished after {cfg.row_timeout:.0f} s for the row; "
                f"{epochs[-1]['bytes'] / 1e6:,.0f} MB and {epochs[-1]['requests']:,} "
                "requests so far"
            )
        epochs = per_epoch(marks, cfg.images)
        for number, samples in enumerate(result["epochs"], 0 if checking else 1):
            _check(reference, case.system, number, samples, cfg.images)
        if checking:
            return epochs[0]["images_per_s"]
        if len(epochs) != cfg.epochs:
            raise RuntimeError(f"{len(epochs)} epochs counted, not {cfg.epochs}")
        rounds.append(epochs)
        facts = epoch_facts(median_epochs(rounds), spec["dataset_bytes"], spec["fraction"])
        case.facts.update(facts)
        case.facts["same samples"] = "yes"
        if "cache" in result:  # the last round's
            c = result["cache"]
            case.facts["cache"] = (
                f"{c['hits']:,} hits, {c['misses']:,} misses, {c['requests']:,} GETs, "
                f"{c['bytes_evicted'] / 1e6:,.0f} MB evicted"
            )
        return later_speed(epochs, cfg.images)

    return measure


# -- the targets (issue 35; 20 and 25 for the bytes) --------------------------------------
def targets(cases: list[Case]) -> list[dict[str, Any]]:
    """Issue 35's targets on the rows that ran, at each shard size. Also points each aioloader
    row's ratio at the best peer of its shard size and cache (the report reads it after)."""
    mine = {c.system: c for c in cases if c.workload == "W8"}
    sizes = dict.fromkeys(
        c.facts["shard samples"] for c in mine.values() if "shard samples" in c.facts
    )
    out: list[dict[str, Any]] = []
    for samples in sizes:
        for fraction, tier, sampler in itertools.product((0.25, 0.5), TIERS, SAMPLERS):
            case = mine.get(ours_name(samples, fraction, tier, sampler))
            if case is not None:
                out += _cached_targets(mine, case, samples, fraction, sampler)
        for sampler in SAMPLERS:
            case = mine.get(ours_name(samples, None, "", sampler))
            if case is not None:
                out.append(_no_cache_bytes(case))
    return out


def _speed(case: Case | None) -> Case | None:
    return case if case is not None and case.values else None


def _cached_targets(
    rows: dict[str, Case], case: Case, samples: int, fraction: float, sampler: str
) -> list[dict[str, Any]]:
    """The targets of one cached aioloader row."""
    label = case.system.split(": aioloader ", 1)[1]  # "memory tier 25%, ShuffledSampler"
    head = f"W8 shards of {samples}: {label}:"
    names = [peer_name(samples, p, fraction) for p in ("litdata", "mosaic")]
    pool = [_speed(rows.get(n)) for n in (*names, peer_name(samples, "webdataset", None))]
    measured = [c for c in pool if c is not None]
    best = max(measured, key=lambda c: harness.median(c) or 0.0, default=None)
    if best is not None:
        case.compare_to = best.system
    bound = 1.2 if sampler == "block" else 1.0
    text = f"{head} epochs 2-3 images/s >= {bound}x best peer"
    out = [harness.target(text, _speed(case), best, bound)]
    base = rows.get(ours_name(samples, None, "", sampler))
    out.append(_beats_no_cache(head, case, base))
    if sampler == "block":
        out.append(_requests(head, case))
    out += _bytes(head, case)
    mosaic = _speed(rows.get(peer_name(samples, "mosaic", 0.5)))
    if sampler == "block" and fraction == 0.5 and mosaic is not None and case.values:
        mb = [sum(c.facts.get(k, 0) for k in ("e2 MB", "e3 MB")) for c in (case, mosaic)]
        value = mb[0] / mb[1] if mb[1] else float("inf")
        text = f"{head} epochs 2-3 bytes <= 0.6x MosaicML's (50%)"
        measured_mb = f"{value:.2f}x ({mb[0]:,.0f} vs {mb[1]:,.0f} MB)"
        out.append(harness.fact_target(text, measured_mb, value <= 0.6))
    return out


def _epochs(case: Case) -> list[int]:
    """The numbers of the epochs ``case.facts`` has figures of: 1, 2, ..."""
    numbers: list[int] = []
    while f"e{len(numbers) + 1} MB" in case.facts:
        numbers.append(len(numbers) + 1)
    return numbers


def _beats_no_cache(head: str, case: Case, base: Case | None) -> dict[str, Any]:
    """Each epoch's median images/s of ``case`` >= the same loader's without a cache."""
    text = f"{head} >= 1.0x the same loader without a cache, in every epoch"
    if _speed(case) is None or _speed(base) is None:
        return harness.fact_target(text, "n/a (a row is missing)", None)
    assert base is not None
    ratios = [
        case.facts[f"e{n} images/s"] / base.facts[f"e{n} images/s"]
        for n in _epochs(case)
        if base.facts.get(f"e{n} images/s")
    ]
    measured = ", ".join(f"e{n} {r:.2f}x" for n, r in enumerate(ratios, 1))
    return harness.fact_target(text, measured or "n/a", min(ratios) >= 1.0 if ratios else None)


def _requests(head: str, case: Case) -> dict[str, Any]:
    """Requests in every epoch <= 2x the number of shards."""
    shards = case.facts.get("shards", 0)
    text = f"{head} requests per epoch <= 2x the shards ({shards})"
    counts = [case.facts[f"e{n} requests"] for n in _epochs(case)]
    if _speed(case) is None or not counts or not shards:
        return harness.fact_target(text, "n/a (row failed)", None)
    measured = f"{max(counts) / shards:.2f}x at most (" + ", ".join(map(str, counts)) + ")"
    return harness.fact_target(text, measured, max(counts) <= 2 * shards)


def _bytes(head: str, case: Case) -> list[dict[str, Any]]:
    """Epoch 1 <= 1.02x the dataset; later epochs <= 1.1x the optimum."""
    if _speed(case) is None:
        return [harness.fact_target(f"{head} bytes per epoch", "n/a (row failed)", None)]
    first = case.facts["e1 / dataset"]
    later = [case.facts[f"e{n} / optimum"] for n in _epochs(case)[1:]]
    return [
        harness.fact_target(
            f"{head} epoch 1 bytes <= 1.02x dataset", f"{first:.3f}x", first <= 1.02
        ),
        harness.fact_target(
            f"{head} epochs 2+ bytes <= 1.1x optimum",
            f"{max(later):.3f}x (worst epoch)",
            max(later) <= 1.1,
        ),
    ]


def _no_cache_bytes(case: Case) -> dict[str, Any]:
    """Without a cache: every epoch's bytes <= 1.05x the dataset."""
    samples, label = case.system.split(": aioloader ", 1)
    text = f"W8 {samples}: {label}: bytes per epoch <= 1.05x the dataset"
    if _speed(case) is None:
        return harness.fact_target(text, "n/a (row failed)", None)
    ratios = [case.facts[f"e{n} MB"] / case.facts["dataset MB"] for n in _epochs(case)]
    measured = ", ".join(f"e{n} {r:.3f}x" for n, r in enumerate(ratios, 1))
    return harness.fact_target(text, measured, max(ratios) <= 1.05)


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W8's cases and notes (``--w8-images``, ``--w8-shard-samples``, ``--w8-leave-out``)."""
    cfg = config(quick, args)
    log("W8: generating JPEGs and formats (cached), starting SeaweedFS and the relay")
    if not harness.can_run("W8", ("obstore", "PIL", "webdataset"), log, weed=True):
        return [], ["Left out: SeaweedFS (`weed`), Pillow, obstore or webdataset is missing."]
    notes = [*NOTES, f"Settings: {cfg}."]
    if cfg.left_out():
        notes.append(f"Left out (--w8-leave-out): {', '.join(cfg.left_out())}.")
    return cases(cfg, log, stack), notes


# -- the child: all epochs of one row on one loader, a mark before it and after each epoch ----
def aioloader_cache(tier: str, max_bytes: int, scratch: Path) -> Any:
    """A cache of ``max_bytes`` in all: in memory, or a quarter in memory (the read-ahead)
    and the rest on disk under ``scratch``."""
    from aioloader.sources import KnownFutureCache

    if tier == "memory":
        return KnownFutureCache(max_bytes=max_bytes)
    memory = max_bytes // 4
    disk_dir = str(scratch / "disk")
    return KnownFutureCache(max_bytes=memory, disk_dir=disk_dir, disk_bytes=max_bytes - memory)


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """(id, tensor CRC) of every sample of every epoch of the row ``spec``."""
    scratch = Path(spec["scratch"])
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    epochs: list[list[list[int]]] = [[]]
    result: dict[str, Any] = {}

    def take(batch: dict[str, Any]) -> None:
        for position, ident in enumerate(batch["id"]):
            tensor = np.ascontiguousarray(np.asarray(batch["image"][position]))
            epochs[-1].append([int(ident), zlib.crc32(tensor.tobytes())])
        if len(epochs[-1]) >= spec["images"]:
            harness.child_mark()
            epochs.append([])

    harness.child_mark()
    work, collate = w6_data.work, w6_data.collate_items
    if spec["system"] == "webdataset":
        for epoch in range(spec["epochs"]):
            for batch in webdataset.batches({**spec, "seed": spec["seed"] + epoch}, work, collate):
                take(batch)
    elif spec["system"] in ("litdata", "mosaic"):
        loader = w6_data.peer_loader(spec, scratch / "cache", spec["cache_bytes"])
        for _ in range(spec["epochs"]):
            for batch in loader:
                take(batch)
    else:

        async def consume() -> None:
            cache = None
            if spec["fraction"] is not None:
                cache = aioloader_cache(spec["tier"], spec["cache_bytes"], scratch)
            shards, loader = aioloader_system.tar_loader(spec, work, collate, cache)
            for _ in range(spec["epochs"]):  # an epoch a loop: nothing read ahead across
                async for batch in loader:
                    take(batch)
            if cache is not None:
                result["cache"] = w6_data.cache_statistics(shards)

        aioloader_system.run_async(consume)
    result["epochs"] = epochs[: spec["epochs"]]
    shutil.rmtree(scratch, ignore_errors=True)
    return result


if __name__ == "__main__":
    harness.child_main(run)
