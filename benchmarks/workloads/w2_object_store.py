"""W2: object storage (SeaweedFS on loopback), the clients of ``micro/bench_object_store``.

Each row runs once per round, interleaved; docs/benchmarks.md (W2) gives the rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import harness
from harness import Case
from storage import DELAY


@dataclasses.dataclass(frozen=True)
class W2Config:
    objects: int = 2048
    inflight: tuple[int, ...] = (64, 256)
    torch_workers: int | None = 2  # None: no torch row


def cases(cfg: W2Config, log: Callable[[str], None], stack: contextlib.ExitStack) -> list[Case]:
    """Start the server and the relay (stopped by ``stack``), upload, build the rows."""
    from micro import bench_object_store as bench

    n = cfg.objects
    info, paths = stack.enter_context(bench.serving(n, log))
    out = []
    for path, endpoint in paths:
        for inflight in cfg.inflight:  # each aioloader row's ratio: aiohttp at the same reads
            theirs = f"hand-written aiohttp, {inflight} in flight"
            facts = {"latency bound": f"{inflight / DELAY:,.0f}/s"} if path != "direct" else {}
            measure = functools.partial(bench.bench_aioloader, info, endpoint, inflight, n, 1, {})
            note = "ObjectStore(max_concurrency=R).get_samples, uvloop"
            system = f"aioloader ObjectStore, {inflight} in flight"
            out.append(_case(path, system, measure, note, theirs, facts=facts))
            measure = functools.partial(bench.bench_aiohttp, info, endpoint, inflight, n, 1)
            note = "aiohttp ClientSession, SigV4 GETs, same batch driver"
            extra = {"group": "hand-written", "baseline": True, "facts": facts}
            out.append(_case(path, theirs, measure, note, theirs, **extra))
        if path == "direct" and cfg.torch_workers is not None:
            workers = cfg.torch_workers
            measure = functools.partial(bench.bench_torch, info, endpoint, workers, n, 1)
            note = "spawned workers, blocking obstore.get in __getitem__"
            theirs = f"hand-written aiohttp, {cfg.inflight[0]} in flight"
            system = f"torch DataLoader, {workers} workers"
            out.append(_case(path, system, measure, note, theirs, group="torch"))
        if path != "direct":  # the loader's own knobs, hand-set and "auto" (issue 21)
            theirs = f"hand-written aiohttp, {cfg.inflight[-1]} in flight"
            hand_set = [(0, bench.lanes_for(reads), reads) for reads in cfg.inflight]
            for workers, prefetch, reads in [*hand_set, ("auto", "auto", None)]:
                knobs = {"workers": workers, "prefetch": prefetch, "max_inflight_reads": reads}
                knobs = {k: v for k, v in knobs.items() if v is not None}
                setting = "auto" if reads is None else f"prefetch {prefetch}, {reads} reads"
                measure = functools.partial(bench.bench_loader, info, endpoint, n, 1, **knobs)
                note = ", ".join(f"{k}={v!r}" for k, v in knobs.items())
                note = f"DataLoader(ObjectStore, {note}), uvloop"
                out.append(_case(path, f"aioloader DataLoader, {setting}", measure, note, theirs))
    return out


def _case(path: str, system: str, measure: Any, note: str, theirs: str, **extra: Any) -> Case:
    """A W2 row in samples/s (group "aioloader" unless ``extra`` says otherwise)."""
    fields = {"group": "aioloader", "note": note, "compare_to": f"{path}: {theirs}", **extra}
    return Case("W2", f"{path}: {system}", "samples/s", measure, **fields)


def targets(found: list[Case]) -> list[dict[str, Any]]:
    """Issue 21: the ``auto`` loader >= 0.95x the best hand-set loader through the relay."""
    rows = [c.system for c in found if c.workload == "W2" and "DataLoader" in c.system]
    if not rows:
        return []
    picked = [name for name in rows if not name.endswith("auto")]
    return [harness.auto_target(found, "W2", "+20 ms: aioloader DataLoader, auto", picked)]


NAME = "W2"
TITLE = "object storage: 64 KiB objects from SeaweedFS on loopback, batches of 64"
NOTES = [
    "Ratios: each aioloader row against the hand-written aiohttp row of the same path and "
    "reads in flight (torch against aiohttp at the smaller number in flight). The latency "
    "bound is reads in flight / 20 ms. On a small machine the server, the relay and the "
    "client share the cores, so the direct rows show what the machine can serve at all.",
]


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W2's cases and notes (left out, and said so, without weed, aiohttp or obstore)."""
    cfg = W2Config(objects=128, inflight=(32,), torch_workers=None) if quick else W2Config()
    log("W2: starting SeaweedFS and the 20 ms relay, uploading")
    if not harness.can_run("W2", ("aiohttp", "obstore", "micro.bench_object_store"), log, True):
        return [], ["Left out: SeaweedFS (`weed`), aiohttp or obstore is missing."]
    return cases(cfg, log, stack), NOTES + ([f"Quick run: {cfg}."] if quick else [])
