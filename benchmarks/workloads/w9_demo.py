"""W9D: ``aioloader demo``'s workload (line images, batch 128, threads) at 0, 1, 2, 4, 8 and
cores - 1 workers, in the same run as W9: how the engine's own work scales with threads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import harness
from systems import aioloader as aioloader_system

from aioloader.cli._demo import PREFETCH, WARM_UP, make_demo_loader
from workloads import w9_feed

NAME = "W9D"
TITLE = "`aioloader demo`'s workload (2,048 line images, batch 128) against build threads"
NOTES = [
    "Every row gives the same batches (checked before timing). Batches/s over `demo_steps` "
    "batches after the demo's 16. Ratios against workers=0.",
]

SEED = 0  # the demo's default seed


def rows(workers_grid: list[int]) -> list[aioloader_system.Aioloader]:
    """One ``async for`` row on uvloop per worker count (prefetch: the demo's 8, or two
    steps per worker past 4 workers)."""
    found = []
    for workers in workers_grid:
        prefetch = max(PREFETCH, 2 * workers)

        def make(workers: int = workers, prefetch: int = prefetch) -> Any:
            return make_demo_loader(seed=SEED, workers=workers, prefetch=prefetch)

        note = f"make_demo_loader(workers={workers}, prefetch={prefetch}), async for, uvloop"
        found.append(
            aioloader_system.Aioloader(make, True, name=f"demo workers={workers}", note=note)
        )
    return found


# -- the workload, as run.py crosses it -----------------------------------------------------
def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W9D's cases and notes."""
    cfg = w9_feed.for_run(quick, args)
    grid = sorted({0, 1, 2} if quick else {0, 1, 2, 4, 8, cfg.workers})
    found = rows(grid)
    harness.verify("W9D", found, 2, harness.fields(("images", "labels", "indices")), log)
    warm = 2 if quick else WARM_UP
    cases = [
        harness.port_case("W9D", row, "batches/s", warm, cfg.demo_steps, i == 0)
        for i, row in enumerate(found)
    ]
    return cases, NOTES


def targets(found: list[harness.Case]) -> list[dict[str, Any]]:
    """Issue 34: workers=8 >= 5x workers=0."""
    named = {c.system: c for c in found if c.workload == "W9D" and c.values}
    if not named:
        return []
    text = "W9D: demo workers=8 >= 5x workers=0"
    return [harness.target(text, named.get("demo workers=8"), named.get("demo workers=0"), 5.0)]
