"""W9C: W9's decode alone, on the CPU (no device, no training step), in the same run.

The same files, per-sample chain and batches as W9; aioloader threads at 0, 4, 8 and
cores - 1 workers (``for``), processes and torch's best configuration at cores - 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import harness
from systems import device as device_system

from workloads import w9_feed
from workloads.w9_feed import W9Config

NAME = "W9C"
TITLE = "W9's decode alone on the CPU: threads, processes and torch (no device, no step)"
NOTES = [
    "The same batches as W9's plain loop, checked before timing. Images/s over the timed "
    "batches (3 s of work at 1,500 images/s per busy core, and 3 per worker, at least) after "
    "one per worker per round. Ratios against aioloader threads=0.",
]


def rows(cfg: W9Config, items: list[tuple[str, int]]) -> list[tuple[Any, int]]:
    """The CPU-only rows and their worker counts, threads at 0 workers first (the baseline)."""
    grid = sorted({0, 4, 8, cfg.workers} if cfg.processes else {0, 2})
    kinds = [("threads", workers, "thread") for workers in grid]
    kinds += [("processes", cfg.workers, "process")] if cfg.processes else []
    found: list[tuple[Any, int]] = []
    for label, workers, executor in kinds:
        make = w9_feed.loader_maker(cfg, items, workers, executor)
        ahead = w9_feed.prefetch(workers)
        note = f"DataLoader(workers={workers}, executor={executor!r}, prefetch={ahead})"
        name = f"aioloader {label}={workers}"
        feed = device_system.loader_feed(name, f"{note}, for", make, "for", batch=cfg.batch)
        found.append((feed, workers))
    torch_row = w9_feed.torch_port(cfg, items, pin=False)
    feed = device_system.Feed(
        torch_row.name, "torch", torch_row.note, open_sync=torch_row.batches, batch=cfg.batch
    )
    return [*found, (feed, torch_row.workers)]


CORE_RATE = 1_500
"""Images/s that one busy core is taken to run W9's chain at: above every rate measured so
far (one thread of a 2-core machine: 912, benchmarks/results/w9-cpu.md), so that a window
sized by it times at least ``cfg.cpu_seconds`` of work."""


def steps(cfg: W9Config, workers: int) -> tuple[int, int]:
    """``(warm, count)`` batches of a row: every worker busy before the clock starts (a
    worker builds a whole step), then at least ``cfg.cpu_seconds`` of work at ``CORE_RATE``
    per busy core (workers, at most the cores, at least one) and 3 steps per worker timed.

    On 16 cores at batch 256: 18 timed batches at 0 workers, 71 at 4, 141 at 8 and 264 at
    15 (threads, processes and torch).
    """
    busy = min(max(1, workers), w9_feed.cores())
    timed = math.ceil(cfg.cpu_seconds * CORE_RATE * busy / cfg.batch)
    return max(cfg.cpu_warm, workers), max(cfg.cpu_count, 3 * workers, timed)


# -- the workload, as run.py crosses it -----------------------------------------------------
def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W9C's cases and notes."""
    if not harness.can_run("W9C", ["simplejpeg", "torch"], log):
        return [], NOTES
    cfg = w9_feed.for_run(quick, args)
    items, kilobytes = w9_feed.data(cfg, log)
    found = rows(cfg, items)
    ports = [w9_feed.reference(cfg, items), *(row for row, _ in found)]
    checked = w9_feed.check("W9C", ports, cfg.verify, log)
    facts = {"batch": cfg.batch, "mean JPEG (KB)": round(kilobytes, 1), "digest": checked}
    cases = []
    for i, (row, workers) in enumerate(found):
        warm, count = steps(cfg, workers)
        case = harness.port_case("W9C", row, "images/s", warm, count, i == 0, facts)
        case.facts = {**facts, "timed batches": f"{count} after {warm}"}
        cases.append(case)
    return cases, NOTES


def targets(found: list[harness.Case]) -> list[dict[str, Any]]:
    """Threads at cores - 1 against threads at 0 (issue 34: >= 10x)."""
    named = {c.system: c for c in found if c.workload == "W9C" and c.values}
    if not named:
        return []
    most = f"aioloader threads={max(1, w9_feed.cores() - 1)}"
    text = f"W9C: {most} (cores - 1) >= 10x threads=0 (CPU only)"
    return [harness.target(text, named.get(most), harness.baseline_of(found, "W9C"), 10.0)]
