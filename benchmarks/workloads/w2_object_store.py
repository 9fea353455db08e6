"""W2: object storage (SeaweedFS on loopback), the rows of ``micro/bench_object_store``.

2,048 objects of 64 KiB in batches of 64, directly and through the +20 ms relay, each row
once per round, interleaved; the hand-written aiohttp client is each path's baseline.
docs/benchmarks.md (W2) gives the rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import harness
from harness import Case
from storage import Relay


@dataclasses.dataclass(frozen=True)
class W2Config:
    objects: int = 2048
    inflight: tuple[int, ...] = (64, 256)
    torch_workers: int | None = 2  # None: no torch row


def cases(cfg: W2Config, log: Callable[[str], None], stack: contextlib.ExitStack) -> list[Case]:
    """Start the server and the relay (stopped by ``stack``), upload, build the rows."""
    import anyio
    from micro import bench_object_store as bench

    from tests._support.s3 import SeaweedServer

    server = stack.enter_context(SeaweedServer(bucket="bench"))
    info = server.info
    anyio.run(bench.upload, info, cfg.objects)
    bench.bench_aiohttp(info, info.endpoint, 256, cfg.objects, 1)  # settle the server
    relay = Relay(info.endpoint)
    stack.callback(relay.close)
    log(f"  W2: {cfg.objects} objects uploaded; relay at {relay.endpoint}")
    out: list[Case] = []
    n = cfg.objects
    for path, endpoint in (("direct", info.endpoint), ("+20 ms", relay.endpoint)):
        for inflight in cfg.inflight:
            bound = (
                {"latency bound": f"{inflight / bench.DELAY:,.0f}/s"} if path != "direct" else {}
            )
            theirs = f"{path}: hand-written aiohttp, {inflight} in flight"
            out.append(
                _case(
                    f"{path}: aioloader ObjectStore, {inflight} in flight",
                    functools.partial(bench.bench_aioloader, info, endpoint, inflight, n, 1, {}),
                    "ObjectStore(max_concurrency=R).get_samples, uvloop",
                    theirs,
                    facts=bound,
                )
            )
            out.append(
                _case(
                    theirs,
                    functools.partial(bench.bench_aiohttp, info, endpoint, inflight, n, 1),
                    "aiohttp ClientSession, SigV4 GETs, same batch driver",
                    theirs,
                    group="hand-written",
                    baseline=True,
                    facts=bound,
                )
            )
        if path != "direct":  # the loader's own knobs, hand-set and auto (issue 21)
            out += _loader_rows(cfg, info, path, endpoint, n)
        if path == "direct" and cfg.torch_workers is not None:
            workers = cfg.torch_workers
            out.append(
                _case(
                    f"{path}: torch DataLoader, {workers} workers",
                    functools.partial(bench.bench_torch, info, endpoint, workers, n, 1),
                    "spawned workers, blocking obstore.get in __getitem__",
                    f"{path}: hand-written aiohttp, {cfg.inflight[0]} in flight",
                    group="torch",
                )
            )
    return out


def _case(
    system: str, measure: Callable[[], float], note: str, compare_to: str, **extra: Any
) -> Case:
    """A W2 row in samples/s (group "aioloader" unless ``extra`` says otherwise)."""
    fields = {"group": "aioloader", **extra}
    return Case(
        workload="W2",
        system=system,
        metric="samples/s",
        measure=measure,
        note=note,
        compare_to=compare_to,
        **fields,
    )


def _loader_rows(cfg: W2Config, info: Any, path: str, endpoint: str, n: int) -> list[Case]:
    """``DataLoader(ObjectStore)`` with each hand-set read budget, then with ``"auto"``."""
    from micro import bench_object_store as bench

    baseline = f"{path}: hand-written aiohttp, {cfg.inflight[-1]} in flight"
    rows = []
    for inflight in cfg.inflight:
        prefetch = bench.lanes_for(inflight)
        rows.append(
            _case(
                f"{path}: aioloader DataLoader, prefetch {prefetch}, {inflight} reads",
                functools.partial(bench.bench_loader, info, endpoint, n, 1, 0, prefetch, inflight),
                f"DataLoader(ObjectStore, workers=0, prefetch={prefetch}, "
                f"max_inflight_reads={inflight}), uvloop",
                baseline,
            )
        )
    rows.append(
        _case(
            f"{path}: aioloader DataLoader, auto",
            functools.partial(bench.bench_loader, info, endpoint, n, 1, "auto", "auto", None),
            "DataLoader(ObjectStore, workers='auto', prefetch='auto'), uvloop; the tuner "
            "carries its knobs from the warm-up epoch",
            baseline,
        )
    )
    return rows


def targets(found: list[Case]) -> list[dict[str, Any]]:
    """Issue 21: the ``auto`` loader >= 0.95x the best hand-set loader through the relay."""
    rows = [c for c in found if c.workload == "W2" and "DataLoader" in c.system]
    if not rows:
        return []
    picked = [c.system for c in rows if not c.system.endswith("auto")]
    return [harness.auto_target(found, "W2", "+20 ms: aioloader DataLoader, auto", picked)]


# -- the workload, as run.py crosses it -----------------------------------------------------
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
