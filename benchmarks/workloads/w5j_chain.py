"""W5J: W5's JPEGs through the GIL-free chain: threads against processes.

The same generated JPEGs as W5; every row runs ``JpegCropResize(size=224, crop=(300, 360),
flip=True)`` per sample with the loader's per-sample rng, and ``TreeCollator()`` per
``ShuffledSampler`` step (uint8 HWC images, labels, indices). docs/benchmarks.md (W5J) gives
each row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import harness
import numpy as np
from systems import torch as torch_system

from aioloader import JpegCropResize, takes_plan, takes_rng
from aioloader.core import BatchPlan, SampleRng, ShuffledSampler, TreeCollator, plan_batch
from workloads import w5_jpeg
from workloads.w5_jpeg import SEED, W5Config, make_jpegs

NAME = "W5J"
TITLE = (
    "GIL-free JPEG chain (W5's 512 JPEGs: simplejpeg decode, random crop 300-360, bilinear "
    "224x224, flip), uint8 HWC, batch 64: threads against processes"
)
NOTES = w5_jpeg.NOTES  # W5's checks and timing

FIELDS = ("images", "labels", "indices")
CHAIN = JpegCropResize(size=224, crop=(300, 360), flip=True)


@takes_rng
def chain_sample(item: tuple[bytes, int], rng: SampleRng) -> dict[str, Any]:
    """``(jpeg, label)`` to ``{"images": uint8 [224, 224, 3], "labels": label}``."""
    return {"images": CHAIN(item[0], rng), "labels": item[1]}


def parts(cfg: W5Config) -> tuple[ShuffledSampler, TreeCollator]:
    return ShuffledSampler(cfg.images, cfg.batch), TreeCollator()


def _numpy(value: Any) -> Any:
    """A torch tensor's numpy view (``np.array(tensor, copy=True)`` warns), else ``value``."""
    return value.numpy() if hasattr(value, "numpy") else value


def arrays(batch: Any) -> dict[str, Any]:
    """A batch's ``FIELDS`` as arrays: a dict's entries (torch's tensors as numpy views), or a
    ``TreeBatch``'s data and indices."""
    if isinstance(batch, dict):
        return {name: _numpy(batch[name]) for name in FIELDS}
    return {**batch.data, "indices": batch.indices}


@takes_plan
def torch_collate(samples: list[dict[str, Any]], plan: BatchPlan) -> dict[str, Any]:
    """torch's ``default_collate`` (tensors in shared memory out of workers), plus indices."""
    import torch
    import torch.utils.data

    batch: dict[str, Any] = torch.utils.data.default_collate(samples)
    batch["indices"] = torch.from_numpy(np.array(plan.indices, np.int64))
    return batch


class PlainLoop(harness.Steps):
    group = "hand-written"
    name = "plain Python loop (1 thread)"
    note = "for each step: the chain on every sample with its rng, np.stack"

    def __init__(self, cfg: W5Config, items: list[tuple[bytes, int]]) -> None:
        self.items, self.sampler = items, parts(cfg)[0]

    def step(self, g: int) -> dict[str, np.ndarray[Any, Any]]:
        plan = plan_batch(self.sampler, SEED, g)
        order = plan.indices.tolist()
        keys = plan.transform_keys().tolist()  # the rng the loader gives each slot
        images = [CHAIN(self.items[i][0], SampleRng(k)) for i, k in zip(order, keys, strict=True)]
        return {
            "images": np.stack(images),
            "labels": np.array([self.items[i][1] for i in order], np.int64),
            "indices": np.array(order, np.int64),
        }


def aioloader_row(cfg: W5Config, items: list[Any], workers: int | str, executor: str = "") -> Any:
    """``DataLoader(transform=chain_sample, workers=w)`` on asyncio (W5's row maker)."""
    return w5_jpeg.aioloader_row(cfg, items, workers, executor, chain_sample, parts)


def rows(cfg: W5Config, items: list[tuple[bytes, int]], log: Callable[[str], None]) -> Any:
    """Every W5J row that can be built here (torch missing: logged and skipped)."""
    found: list[Any] = [PlainLoop(cfg, items)]
    found += [aioloader_row(cfg, items, w) for w in (0, 1, 2, "auto")]
    if cfg.processes:
        found.append(aioloader_row(cfg, items, 2, executor="process"))
    how = "dataset runs the chain with aioloader's rng, our order, default_collate"

    def torch_row(workers: int) -> torch_system.Torch:
        sampler = parts(cfg)[0]
        dataset = torch_system.Dataset(items, chain_sample, (SEED, sampler.steps_per_epoch))
        collate = torch_system.PlanCollate(torch_collate, sampler, SEED)
        return torch_system.Torch(workers, how, dataset, sampler, SEED, collate)

    optional = [("torch", lambda: [torch_row(2 if cfg.processes else 0)])]
    return found + harness.installed_rows("W5J", optional, log)


# -- the workload, as run.py crosses it -----------------------------------------------------
def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W5J's cases and notes (``quick``: 16 small JPEGs, no process rows)."""
    if not harness.can_run("W5J", ["simplejpeg"], log):
        return [], NOTES
    small = {"images": 16, "batch": 8, "source_width": 160, "source_height": 120}
    cfg = W5Config(**small, warm=1, count=2, verify=2, processes=False) if quick else W5Config()
    log("W5J: generating JPEGs, building and checking every port")
    jpegs = make_jpegs(cfg.images, cfg.source_height, cfg.source_width, cfg.quality)
    found = rows(cfg, [(data, index % 10) for index, data in enumerate(jpegs)], log)
    harness.verify("W5J", found, cfg.verify, arrays, log)
    facts = {"mean JPEG size (KB)": round(sum(map(len, jpegs)) / len(jpegs) / 1e3, 1)}
    cases = [
        harness.port_case("W5J", row, "images/s", cfg.warm, cfg.count, i == 0, facts, cfg.batch)
        for i, row in enumerate(found)
    ]
    return cases, NOTES + ([f"Quick run: {cfg}."] if quick else [])


def targets(found: list[harness.Case]) -> list[dict[str, Any]]:
    """Threads against one thread, against processes, and auto against the hand-set rows."""
    if not any(c.workload == "W5J" for c in found):
        return []
    named = {c.system: c for c in found if c.workload == "W5J" and c.values}
    zero, two = named.get("aioloader workers=0"), named.get("aioloader workers=2")
    processes = named.get("aioloader processes=2")
    grid = [f"aioloader workers={w}" for w in (0, 1, 2)] + ["aioloader processes=2"]
    return [
        harness.target("W5J: threads workers=2 >= 1.8x workers=0", two, zero, 1.8),
        harness.target("W5J: threads workers=2 >= 0.9x processes=2", two, processes, 0.9),
        harness.auto_target(found, "W5J", "aioloader workers=auto", grid),
    ]
