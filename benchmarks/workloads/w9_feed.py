"""W9: accelerator feed. A training step per batch on a device, fed from JPEG files.

4,096 generated JPEGs (500x375, W5's pictures) in a folder on tmpfs; per sample: open,
read, simplejpeg decode, random crop 300-360, bilinear 224x224, flip, uint8 HWC (W5J's
chain, with the loader's per-sample rng), ``TreeCollator``; normalisation on the device.
Every row feeds the same ``Trainer`` (ResNet-50, bf16 autocast, channels-last, batch 256
on a GPU; a tiny model on the CPU in the dry run). W9C (CPU only) and W9D (the demo) are
the two other tables of the same run. docs/benchmarks.md (W9) gives each row.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
import numpy as np
from systems import device as device_system
from systems import torch as torch_system

from aioloader import DataLoader, SampleRng, ShuffledSampler, TreeCollator
from aioloader.core import plan_batch
from workloads import w9_data, w9_train
from workloads.w5j_chain import torch_collate
from workloads.w9_data import SEED

NAME = "W9"
TITLE = (
    "accelerator feed: JPEG files on tmpfs (open, simplejpeg decode, crop 300-360, 224x224 "
    "bilinear, flip, uint8 HWC) to a training step on the device"
)
NOTES = [
    "Every row gives the same batches as a plain loop, checked on the device's copies before "
    "timing (the digest column). Images/s over `count` training steps after `warm`, between "
    "two device synchronisations. Ratios against the synthetic batch already on the device.",
]


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclasses.dataclass(frozen=True)
class W9Config:
    """A run's sizes: the GPU form by default; ``for_run`` picks the CPU and quick forms."""

    images: int = 4096
    height: int = 375
    width: int = 500
    batch: int = 256
    warm: int = 8
    count: int = 30
    verify: int = 2
    workers: int = dataclasses.field(default_factory=lambda: max(1, cores() - 1))
    device: str = "cuda"
    model: str = "resnet50"
    processes: bool = True  # the rows that start worker processes
    folder: str = "/dev/shm/aioloader-w9"
    cpu_warm: int = 2  # W9C: the decode alone
    cpu_count: int = 8
    cpu_seconds: float = 3.0  # W9C: each row's timed window at least (w9_cpu.steps)
    demo_steps: int = 256  # W9D

    @property
    def dry(self) -> bool:
        """Not a GPU run: its figures are no GPU figures."""
        return self.device != "cuda"


_CONFIGS: dict[tuple[Any, ...], W9Config] = {}


def for_run(quick: bool, args: Any) -> W9Config:
    """The run's config (one per run, shared by W9, W9C and W9D): the GPU form where torch
    sees one (or ``--w9-device``), else the CPU form (1,024 images, batch 64, the tiny
    model); ``quick``: 32 small images, batch 8, one or two steps, no worker processes."""
    device = w9_train.pick_device(getattr(args, "w9_device", None) or "auto")
    folder = getattr(args, "w9_folder", None)
    key = (quick, device, folder)
    if key not in _CONFIGS:
        options: dict[str, Any] = {"device": device}
        if folder:
            options["folder"] = os.fspath(folder)
        if quick:
            options |= {"images": 32, "height": 120, "width": 160, "batch": 8, "warm": 1}
            options |= {"count": 2, "verify": 1, "workers": 2, "processes": False}
            options |= {"cpu_warm": 1, "cpu_count": 2, "cpu_seconds": 0.0, "demo_steps": 4}
        if device != "cuda":
            options |= {"model": "tiny"}
            if not quick:
                options |= {"images": 1024, "batch": 64}
        _CONFIGS[key] = W9Config(**options)
    return _CONFIGS[key]


def data(cfg: W9Config, log: Callable[[str], None]) -> tuple[list[tuple[str, int]], float]:
    """The dataset's ``(path, label)`` items (files written if missing) and their mean KB."""
    files = w9_data.Files(cfg.images, cfg.height, cfg.width)
    folder = Path(cfg.folder) / f"{cfg.images}-{cfg.width}x{cfg.height}"
    log(f"W9: {cfg.images} JPEGs in {folder} (written if missing, {cores()} processes)")
    paths = w9_data.write_jpegs(folder, files, processes=cores())
    return w9_data.items(paths), w9_data.mean_kilobytes(paths)


def prefetch(workers: int) -> int:
    """Steps built ahead: two per worker (a worker builds a whole step), at least 4."""
    return max(4, 2 * workers)


def sampler(cfg: W9Config) -> ShuffledSampler:
    return ShuffledSampler(cfg.images, cfg.batch)


def loader_maker(
    cfg: W9Config, items: list[tuple[str, int]], workers: int | str, executor: str = "thread"
) -> Callable[[], Any]:
    """``make()``: a ``DataLoader`` over ``items`` running ``load_sample`` per sample."""
    return lambda: DataLoader(
        items,
        sampler(cfg),
        TreeCollator(),
        seed=SEED,
        transform=w9_data.load_sample,
        workers=workers,
        executor=executor,
        prefetch="auto" if workers == "auto" else prefetch(int(workers)),
    )


class Reference(harness.Steps):
    """The batches the loaders must give: the chain in a plain loop, one thread."""

    def __init__(self, cfg: W9Config, items: list[tuple[str, int]]) -> None:
        self.cfg, self.items = cfg, items

    def step(self, g: int) -> dict[str, Any]:
        plan = plan_batch(sampler(self.cfg), SEED, g)
        order, keys = plan.indices.tolist(), plan.transform_keys().tolist()
        samples = [
            w9_data.load_sample(self.items[i], SampleRng(k))
            for i, k in zip(order, keys, strict=True)
        ]
        return {
            "images": np.stack([sample["images"] for sample in samples]),
            "labels": np.array([sample["labels"] for sample in samples], np.int64),
            "indices": np.array(order, np.int64),
        }


def reference(cfg: W9Config, items: list[tuple[str, int]]) -> device_system.Feed:
    """The reference as a ``Feed`` (checks only, never timed)."""
    note = "for each step: the chain on every sample with its rng, np.stack (checks only)"
    steps = Reference(cfg, items)
    return device_system.Feed(
        "plain loop (reference)", "hand-written", note, open_sync=steps.batches, batch=cfg.batch
    )


def torch_port(cfg: W9Config, items: list[tuple[str, int]], pin: bool) -> torch_system.Torch:
    """torch's best documented configuration: workers = cores - 1 (0 without worker
    processes), ``pin_memory`` (on a GPU), persistent workers, torch's default prefetch,
    tensor collate (``default_collate``)."""
    workers = cfg.workers if cfg.processes else 0
    order = sampler(cfg)
    dataset = torch_system.Dataset(items, w9_data.load_sample, (SEED, order.steps_per_epoch))
    collate = torch_system.PlanCollate(torch_collate, order, SEED)
    how = "dataset opens the file and runs the chain with aioloader's rng, default_collate"
    options: dict[str, Any] = {"prefetch_factor": None, "pin_memory": pin}
    options |= {"persistent_workers": True} if workers else {}
    return torch_system.Torch(workers, how, dataset, order, SEED, collate, **options)


def device_path(cfg: W9Config) -> tuple[Callable[[Any], Any], str]:
    """aioloader's host batches to the device in one line, and its name: the batches of
    ``to_device_stream(batches, device)`` (pooled page-locked staging, or a process worker's
    shared memory read in place; copies on a side stream, handed over once complete)."""
    from aioloader.interop.torch import to_device_stream

    return lambda batches: to_device_stream(batches, cfg.device), "to_device_stream"


def torch_move(cfg: W9Config) -> Callable[[Any], Any]:
    """A torch batch (pinned by its loader) to the device, as torch's docs show it."""
    return device_system.per_batch(
        lambda batch: {k: v.to(cfg.device, non_blocking=True) for k, v in batch.items()}
    )


def rows(cfg: W9Config, items: list[tuple[str, int]], trainer: Any) -> list[Any]:
    """The loader rows (the synthetic one apart), each feeding ``trainer``."""
    w = cfg.workers
    common: dict[str, Any] = {"trainer": trainer, "batch": cfg.batch}
    found: list[Any] = []
    torch_row = torch_port(cfg, items, pin=not cfg.dry)
    note = torch_row.note + "; for, .to(device, non_blocking=True)"
    found.append(
        device_system.Feed(
            torch_row.name,
            "torch",
            note,
            open_sync=torch_row.batches,
            wrap=torch_move(cfg),
            **common,
        )
    )
    wrap, path = device_path(cfg)
    settings: dict[str, Any] = {"wrap": wrap, **common}
    forms: list[tuple[str, int | str, str]] = [("threads", w, "thread")]
    forms += [("processes", w, "process")] if cfg.processes else []
    for label, workers, executor in forms:
        make = loader_maker(cfg, items, workers, executor)
        what = f"DataLoader(workers={workers}, executor={executor!r}, prefetch={prefetch(w)})"
        for form in ("for", "async for"):
            name, note = f"aioloader {label}={workers}, {form}", f"{what}, {form}, {path}"
            found.append(device_system.loader_feed(name, note, make, form, **settings))
    make = loader_maker(cfg, items, "auto")
    note = f"DataLoader(workers='auto', prefetch='auto'), for, {path}"
    found.append(
        device_system.loader_feed("aioloader workers=auto, for", note, make, "for", **settings)
    )
    return found


def digest(batches: list[dict[str, Any]]) -> str:
    """SHA-256 (16 hex digits) of the batches' fields, in order."""
    hasher = hashlib.sha256()
    for batch in batches:
        for name in device_system.FIELDS:
            hasher.update(np.ascontiguousarray(batch[name]).tobytes())
    return hasher.hexdigest()[:16]


def check(workload: str, ports: list[Any], steps: int, log: Callable[[str], None]) -> str:
    """Every port gives the first port's batches on ``steps`` steps (before any timing);
    returns their digest."""
    with ports[0].batches(steps) as batches:
        expected = list(batches)
    harness.verify(workload, ports[1:], steps, device_system.fields, log, expected)
    return digest(expected)


# -- the workload, as run.py crosses it -----------------------------------------------------
def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W9's cases and notes."""
    if not harness.can_run("W9", ["simplejpeg", "torch"], log):
        return [], NOTES
    cfg = for_run(quick, args)
    items, kilobytes = data(cfg, log)
    trainer = w9_train.Trainer(cfg.device, cfg.model)
    found = rows(cfg, items, trainer)
    checked = check("W9", [reference(cfg, items), *found], cfg.verify, log)
    synthetic = device_system.Feed(
        "synthetic batch on the device (upper bound)",
        "upper bound",
        "one fixed batch already on the device, no loader, no copy",
        open_sync=w9_train.synthetic(cfg.batch, 224, cfg.device),
        trainer=trainer,
        batch=cfg.batch,
    )
    facts = {
        "device": cfg.device,
        "model": cfg.model,
        "batch": cfg.batch,
        "mean JPEG (KB)": round(kilobytes, 1),
        "digest": checked,
    }
    cases = [
        harness.port_case("W9", row, "images/s", cfg.warm, cfg.count, i == 0, facts)
        for i, row in enumerate([synthetic, *found])
    ]
    return cases, NOTES + notes(cfg, quick)


def notes(cfg: W9Config, quick: bool) -> list[str]:
    """What kind of run this was."""
    found = [f"Config: {cfg}."]
    if cfg.dry:
        found.append(
            f"DRY RUN on {cfg.device} with the {cfg.model} model: no GPU figures (owed: they "
            "come from `benchmarks/device/w9.sh` on a machine with a GPU)."
        )
    return found + (["Quick run."] if quick else [])


def targets(found: list[harness.Case]) -> list[dict[str, Any]]:
    """Issue 34's targets on W9's rows (on a dry run, measured but no GPU figures)."""
    mine = [c for c in found if c.workload == "W9" and c.values]
    if not mine:
        return []
    dry = " (dry run, not a GPU)" if mine[0].facts.get("device") != "cuda" else ""
    synthetic = harness.baseline_of(found, "W9")
    best = harness.best(found, "W9", "aioloader")
    threads = harness.best(found, "W9", "aioloader", "aioloader threads")
    torch_best = harness.best(found, "W9", "torch")
    hand_set = [c.system for c in mine if c.group == "aioloader" and "auto" not in c.system]
    result = [
        harness.target(f"W9: best aioloader row >= 0.95x synthetic{dry}", best, synthetic, 0.95),
        harness.target(f"W9: best aioloader row >= 2x torch's best{dry}", best, torch_best, 2.0),
        harness.target(f"W9: threads >= 0.9x synthetic{dry}", threads, synthetic, 0.9),
    ]
    for label in ("threads", "processes"):
        sync = next(
            (
                c
                for c in mine
                if c.system.startswith(f"aioloader {label}=") and c.system.endswith(", for")
            ),
            None,
        )
        asynchronous = next(
            (
                c
                for c in mine
                if c.system.startswith(f"aioloader {label}=") and c.system.endswith("async for")
            ),
            None,
        )
        text = f"W9: {label}, async for >= 0.97x for{dry}"
        result.append(harness.target(text, asynchronous, sync, 0.97))
    result.append(harness.auto_target(found, "W9", "aioloader workers=auto, for", hand_set))
    result[-1]["target"] += dry
    return result
