"""W8: multi-epoch training with a cache smaller than the dataset (issues 20 and 25).

W6's JPEGs in about 32 shards per format, read through the +20 ms relay for three epochs on one
loader with a cache of 25% and 50% of the dataset; the relay counts bytes and requests per
epoch, against the known optimum ``dataset - cache`` (docs/benchmarks.md, W8). ``python
benchmarks/workloads/w8_cache.py SPEC_JSON`` runs one row (the child).
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

from workloads import w6_data  # noqa: E402

ANCHORS = (0, 17, 1000, 4095)  # samples whose tensors the parent computes itself
NAME = "W8"
OPT_IN = True  # many minutes
TITLE = (
    "three epochs with a cache of 25% and 50% of the dataset: W6's JPEGs in about 32 "
    "shards from SeaweedFS, +20 ms per request; bytes and requests per epoch"
)
NOTES = [
    "Bytes and requests are counted at the relay in front of SeaweedFS, per epoch (the child "
    "pauses at each boundary). Every system iterates one epoch a loop. The cache budget bounds "
    "all a system holds (aioloader's disk rows: a quarter in memory for read-ahead, the rest on "
    "disk). 'eN / optimum' divides epoch N's bytes by dataset - cache (no policy fetches less), "
    "'e1 / dataset' by the system's stored bytes, 'all epochs / optimum' all epochs' bytes by "
    "dataset + (epochs - 1) x optimum. Every epoch of every row delivered each sample once and "
    "the same tensor per sample (CRC-32, anchored by preprocess() in the parent). Ratios: "
    "epoch-2 images/s against WebDataset (no cache). One run per round.",
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


# -- the byte accounting ------------------------------------------------------------------
def cache_bytes(fraction: float, dataset_bytes: int) -> int:
    return int(fraction * dataset_bytes)


def optimum_bytes(fraction: float, dataset_bytes: int) -> int:
    """Fewest bytes any policy fetches in an epoch after the first: dataset - cache."""
    return dataset_bytes - cache_bytes(fraction, dataset_bytes)


def epoch_facts(
    epochs: list[dict[str, float]], dataset_bytes: int, fraction: float | None
) -> dict[str, Any]:
    """A row's cells from each epoch's ``bytes``, ``requests``, ``images_per_s``
    (``fraction`` None: no cache, the optimum is the whole dataset)."""
    optimum = dataset_bytes if fraction is None else optimum_bytes(fraction, dataset_bytes)
    facts: dict[str, Any] = {
        "dataset MB": dataset_bytes / 1e6,
        "cache MB": 0.0 if fraction is None else cache_bytes(fraction, dataset_bytes) / 1e6,
        "optimum MB (epochs 2+)": optimum / 1e6,
    }
    for n, epoch in enumerate(epochs, 1):
        facts[f"e{n} MB"] = epoch["bytes"] / 1e6
        facts[f"e{n} requests"] = int(epoch["requests"])
        facts[f"e{n} images/s"] = epoch["images_per_s"]
        key, whole = ("e1 / dataset", dataset_bytes) if n == 1 else (f"e{n} / optimum", optimum)
        facts[key] = round(epoch["bytes"] / whole, 3)
    if epochs:  # read-ahead may cross an epoch boundary; the total cannot be misattributed
        fewest = dataset_bytes + (len(epochs) - 1) * optimum
        facts["all epochs / optimum"] = round(sum(e["bytes"] for e in epochs) / fewest, 3)
    return facts


def per_epoch(marks: list[dict[str, float]], images: int) -> list[dict[str, float]]:
    """Counters between consecutive marks: bytes, requests and images/s of each epoch."""
    return [
        {
            "bytes": after["bytes_to_client"] - before["bytes_to_client"],
            "requests": after["requests"] - before["requests"],
            "images_per_s": images / (after["time"] - before["time"]),
        }
        for before, after in itertools.pairwise(marks)
    ]


# -- the parent ---------------------------------------------------------------------------
def prepare(cfg: W8Config, log: Callable[[str], None]) -> dict[str, Path]:
    """The images (W6's, cached) and every format at W8's shard size; returns the folders."""
    root = w6_data.cache_dir(cfg.images, cfg.seed)
    folder = w6_data.generate(root, cfg.images, cfg.seed)
    log(f"  W8: images and formats under {root}")
    chunk = -(-w6_data.dataset_bytes(folder) // cfg.shards) + 4096  # about one tar shard
    out = root / f"w8-{cfg.shards}"
    per_shard = -(-cfg.images // cfg.shards)
    peers = ("litdata", "mosaic") if cfg.peers else ()
    return w6_data.write_formats(folder, cfg.images, out, per_shard, (chunk, chunk), peers)


def rows(cfg: W8Config, sizes: dict[str, int], keys: list[str], index_dir: str) -> list:
    """``(name, spec, note)`` of every row: aioloader (memory, disk), then the peers."""

    def spec(system: str, fraction: float | None, stored: str, **extra: Any) -> dict[str, Any]:
        size = sizes.get(stored, 0)  # a format a missing peer could not write is never read
        cached = {} if fraction is None else {"cache_bytes": cache_bytes(fraction, size)}
        return {"system": system, "fraction": fraction, "dataset_bytes": size, **cached, **extra}

    tars = {"keys": keys, "index_dir": index_dir, "inflight": cfg.inflight}
    samplers = {"block": "BlockShuffledSampler(window=4)", "global": "ShuffledSampler"}
    out = [
        (
            f"aioloader {tier} tier {fraction:.0%}, {label}",
            spec("aioloader", fraction, "tar", tier=tier, sampler=sampler, **tars),
            f"TarShards(cache=KnownFutureCache, {tier} tier), {label}, "
            f"DataLoader(workers={cfg.workers})",
        )
        for fraction in cfg.fractions
        for tier in ("memory", "disk")
        for sampler, label in samplers.items()
    ]
    if not cfg.peers:
        return out
    for fraction in cfg.fractions:
        for system, label, limit, prefix in (
            ("mosaic", "MosaicML Streaming", "cache_limit", "mds"),
            ("litdata", "LitData", "max_cache_size", "litdata"),
        ):
            note = f"StreamingDataset({limit}, shuffle=True) + StreamingDataLoader, local disk"
            row = spec(system, fraction, prefix, prefix=prefix)
            out.append((f"{label} {limit} {fraction:.0%}", row, note))
    note = "WebDataset(shardshuffle).shuffle(1000), torch DataLoader, presigned URLs"
    return [*out, ("WebDataset, no cache", spec("webdataset", None, "tar", keys=keys), note)]


def cases(cfg: W8Config, log: Callable[[str], None], stack: contextlib.ExitStack) -> list[Case]:
    """Prepare the data, start the server and the relay (stopped by ``stack``), build rows."""
    formats = prepare(cfg, log)
    others = {k: formats[k] for k in ("mds", "litdata") if k in formats}
    rig = start(stack, "w8-bench", ("tar", formats["tar"]), others)
    sizes = {k: w6_data.folder_bytes(formats[k]) for k in ("tar", *others)}
    log(
        f"  W8: {len(rig.keys)} tar shards ({sizes['tar']:,} bytes) and the peers' formats uploaded"
    )
    # sample -> CRC-32 of its tensor: anchored here by preprocess(), the rest as rows give them
    reference = {
        i: zlib.crc32(w6_data.preprocess(w6_data.read_jpeg(formats["jpeg"], i)).tobytes())
        for i in ANCHORS
        if i < cfg.images
    }
    common = {
        **rig.spec(rig.relay.endpoint),
        "scratch": str(Path(tempfile.gettempdir()) / f"aioloader-w8-run-{os.getpid()}"),
        **{k: getattr(cfg, k) for k in ("images", "batch", "seed", "epochs", "workers")},
    }
    out = []
    for name, row, note in rows(cfg, sizes, rig.keys, rig.index_dir):
        spec = {**common, **row}
        case = w6_data.case("W8", name, spec, note, "epoch-2 images/s")
        case.baseline = case.group == "webdataset"
        if case.error is None:
            case.measure = _measure(case, spec, rig.relay, reference, cfg)
        out.append(case)
    return out


def _check(reference: dict[int, int], row: str, number: int, samples: list, images: int) -> None:
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
    case: Case, spec: dict[str, Any], relay: Relay, reference: dict[int, int], cfg: W8Config
) -> Callable[[], float]:
    calls = [0]

    def measure() -> float:
        calls[0] += 1
        checking = calls[0] == 1  # the warm-up round: one epoch, checked before any timing
        row = {**spec, "epochs": 1} if checking else spec
        marks: list[dict[str, float]] = []

        def on_mark(_: str) -> None:
            marks.append({**relay.counters(), "time": time.perf_counter()})

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
        case.facts.update(epoch_facts(epochs, spec["dataset_bytes"], spec["fraction"]))
        case.facts["same samples"] = "yes"
        if "cache" in result:
            c = result["cache"]
            case.facts["cache"] = (
                f"{c['hits']:,} hits, {c['misses']:,} misses, {c['requests']:,} GETs, "
                f"{c['bytes_evicted'] / 1e6:,.0f} MB evicted"
            )
        return epochs[min(1, len(epochs) - 1)]["images_per_s"]  # epoch 2's

    return measure


def targets(cases: list[Case]) -> list[dict[str, Any]]:
    """Issue 20's and 25's byte targets, on the rows that ran."""
    mine = [c for c in cases if c.workload == "W8" and c.values]
    ours = [c for c in mine if c.group == "aioloader"]
    out: list[dict[str, Any]] = []
    for case in ours:
        e1 = case.facts.get("e1 / dataset")
        if e1 is not None:
            text = f"W8: {case.system}: epoch 1 bytes <= 1.02x dataset"
            out.append(harness.fact_target(text, f"{e1:.3f}x", e1 <= 1.02))
        later = [v for k, v in case.facts.items() if k.endswith("/ optimum")]
        if later:
            bound, worst = 1.1 if "Block" in case.system else 1.2, max(later)
            text = f"W8: {case.system}: epochs 2+ bytes <= {bound}x optimum"
            out.append(harness.fact_target(text, f"{worst:.3f}x (worst epoch)", worst <= bound))
    theirs = next((c for c in mine if c.group == "mosaic" and "50%" in c.system), None)
    for case in ours if theirs else ():
        if "50%" in case.system and "Block" in case.system:
            mb = [sum(c.facts.get(k, 0) for k in ("e2 MB", "e3 MB")) for c in (case, theirs)]
            value = mb[0] / mb[1] if mb[1] else float("inf")
            text = f"W8: {case.system}: epochs 2-3 bytes <= 0.6x MosaicML's (50%)"
            measured = f"{value:.2f}x ({mb[0]:,.0f} vs {mb[1]:,.0f} MB)"
            out.append(harness.fact_target(text, measured, value <= 0.6))
    return out


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W8's cases and notes (``--w8-images`` sets the dataset size)."""
    images = getattr(args, "w8_images", None) or 4096
    cfg = W8Config(images=512, shards=16, peers=False) if quick else W8Config(images=images)
    log("W8: generating JPEGs and formats (cached), starting SeaweedFS and the relay")
    if not harness.can_run("W8", ("obstore", "PIL", "webdataset"), log, weed=True):
        return [], ["Left out: SeaweedFS (`weed`), Pillow, obstore or webdataset is missing."]
    return cases(cfg, log, stack), [*NOTES, f"Settings: {cfg}."]


# -- the child: all epochs of one row on one loader, a mark before it and after each epoch ----
def aioloader_cache(tier: str, max_bytes: int, scratch: Path) -> Any:
    """A cache of ``max_bytes`` in all: in memory, or a quarter in memory (the read-ahead)
    and the rest on disk under ``scratch``."""
    from aioloader.sources import KnownFutureCache

    if tier == "memory":
        return KnownFutureCache(max_bytes=max_bytes)
    memory = max_bytes // 4
    disk = {"disk_dir": str(scratch / "disk"), "disk_bytes": max_bytes - memory}
    return KnownFutureCache(max_bytes=memory, **disk)


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
            cache = aioloader_cache(spec["tier"], spec["cache_bytes"], scratch)
            shards, loader = aioloader_system.tar_loader(spec, work, collate, cache)
            for _ in range(spec["epochs"]):  # an epoch a loop: nothing read ahead across
                async for batch in loader:
                    take(batch)
            result["cache"] = w6_data.cache_statistics(shards)

        aioloader_system.run_async(consume)
    result["epochs"] = epochs[: spec["epochs"]]
    shutil.rmtree(scratch, ignore_errors=True)
    return result


if __name__ == "__main__":
    harness.child_main(run)
