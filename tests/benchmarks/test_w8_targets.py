"""benchmarks/workloads/w8_cache.py: W8's options, rows and issue 35's targets from made-up
results (exact verdicts; nothing runs)."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str) -> ModuleType:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module(name)


def test_the_options_parse_and_name_what_is_left_out() -> None:
    w8, run = _module("workloads.w8_cache"), _module("run")
    assert w8.shard_samples_option("128, 32,128") == (128, 32)
    assert w8.leave_out_option("Mosaic,disk") == ("mosaic", "disk")
    for bad in ("", "0", "32,x"):
        with pytest.raises(argparse.ArgumentTypeError, match="--w8-shard-samples must be"):
            w8.shard_samples_option(bad)
    for bad in ("", "mosaic,foo", "memory,disk"):
        with pytest.raises(argparse.ArgumentTypeError, match="--w8-leave-out must name"):
            w8.leave_out_option(bad)
    args = run.parse_args(["--workloads", "W8"])
    assert (args.w8_shard_samples, args.w8_leave_out) == (None, None)
    full = w8.config(False, args)
    assert (full.images, full.shard_samples, full.tiers, full.peers) == (
        4096,
        (32, 128),
        ("memory", "disk"),
        ("litdata", "mosaic", "webdataset"),
    )
    assert full.left_out() == []
    argv = ["--workloads", "W8", "--w8-shard-samples", "128", "--w8-leave-out", "mosaic,disk"]
    budget = w8.config(False, run.parse_args(argv))
    assert (budget.shard_samples, budget.tiers, budget.peers) == (
        (128,),
        ("memory",),
        ("litdata", "webdataset"),
    )
    assert budget.left_out() == ["mosaic", "disk"]
    quick = w8.config(True, run.parse_args(["--quick"]))
    assert (quick.images, quick.shard_samples, quick.peers) == (512, (32,), ())
    with pytest.raises(SystemExit):
        run.parse_args(["--w8-leave-out", "memory,disk"])


def test_rows_at_each_shard_size_name_it_and_pair_every_cache_with_none() -> None:
    w8 = _module("workloads.w8_cache")
    cfg = w8.W8Config(shard_samples=(128,), fractions=(0.25,), tiers=("disk",))
    sizes = {"tar": 1000, "mds": 900, "litdata": 800}
    found = w8.rows(cfg, 128, sizes, ["k0"], "/index")
    assert [(name, spec["system"], spec["fraction"]) for name, spec, _ in found] == [
        ("shards of 128: aioloader no cache, BlockShuffledSampler(window=4)", "aioloader", None),
        ("shards of 128: aioloader no cache, ShuffledSampler", "aioloader", None),
        (
            "shards of 128: aioloader disk tier 25%, BlockShuffledSampler(window=4)",
            "aioloader",
            0.25,
        ),
        ("shards of 128: aioloader disk tier 25%, ShuffledSampler", "aioloader", 0.25),
        ("shards of 128: MosaicML Streaming cache_limit 25%", "mosaic", 0.25),
        ("shards of 128: LitData max_cache_size 25%", "litdata", 0.25),
        ("shards of 128: WebDataset, no cache", "webdataset", None),
    ]
    specs = [spec for _, spec, _ in found]
    assert "cache_bytes" not in specs[0]
    assert (specs[2]["cache_bytes"], specs[2]["tier"], specs[2]["sampler"]) == (
        250,
        "disk",
        "block",
    )
    assert (specs[4]["cache_bytes"], specs[4]["prefix"]) == (225, "mds-128")
    assert (specs[5]["cache_bytes"], specs[5]["prefix"]) == (200, "litdata-128")


def _ours(
    w8: ModuleType,
    name: str,
    values: list[float],
    speeds: tuple[float, ...],
    mb: tuple[float, ...],
    req: tuple[int, ...],
) -> Any:
    """A made-up aioloader row at shards of 128 (32 shards), dataset 200 MB, optimum 150 MB."""
    facts: dict[str, Any] = {"shard samples": 128, "shards": 32, "dataset MB": 200.0}
    for n, (speed, megabytes, requests) in enumerate(zip(speeds, mb, req, strict=True), 1):
        facts.update({f"e{n} images/s": speed, f"e{n} MB": megabytes, f"e{n} requests": requests})
        whole = 200.0 if n == 1 or "no cache" in name else 150.0
        facts["e1 / dataset" if n == 1 else f"e{n} / optimum"] = round(megabytes / whole, 3)
    return _case(w8, name, values, "aioloader", facts)


def _case(w8: ModuleType, name: str, values: list[float], group: str, facts: dict[str, Any]) -> Any:
    case = w8.Case("W8", name, "epochs 2-3 images/s", lambda: 0.0, group=group, facts=facts)
    case.values = values
    if not values:
        case.error = "RuntimeError: made up"
    return case


def test_targets_give_exact_verdicts_from_made_up_results() -> None:
    w8 = _module("workloads.w8_cache")
    head = "W8 shards of 128:"
    peer = {"shard samples": 128, "shards": 32}
    cases = [
        _ours(w8, "shards of 128: aioloader no cache, BlockShuffledSampler(window=4)",
              [400.0], (380.0, 400.0, 410.0), (204.0, 206.0, 212.0), (900, 900, 900)),
        _ours(w8, "shards of 128: aioloader no cache, ShuffledSampler",
              [300.0], (300.0, 300.0, 300.0), (200.0, 201.0, 202.0), (2000, 2000, 2000)),
        _ours(w8, "shards of 128: aioloader memory tier 25%, BlockShuffledSampler(window=4)",
              [660.0, 600.0, 640.0], (390.0, 450.0, 380.0), (202.0, 147.0, 168.0), (40, 64, 65)),
        _ours(w8, "shards of 128: aioloader memory tier 25%, ShuffledSampler",
              [500.0], (320.0, 500.0, 500.0), (201.0, 150.0, 151.5), (300, 300, 300)),
        _ours(w8, "shards of 128: aioloader memory tier 50%, BlockShuffledSampler(window=4)",
              [700.0], (400.0, 700.0, 700.0), (204.5, 100.0, 86.0), (33, 32, 32)),
        _ours(w8, "shards of 128: aioloader memory tier 50%, ShuffledSampler", [], (), (), ()),
        _case(w8, "shards of 128: MosaicML Streaming cache_limit 25%", [], "mosaic", peer),
        _case(w8, "shards of 128: LitData max_cache_size 25%", [500.0], "litdata", peer),
        _case(w8, "shards of 128: MosaicML Streaming cache_limit 50%", [100.0], "mosaic",
              {**peer, "e2 MB": 300.0, "e3 MB": 320.0}),
        _case(w8, "shards of 128: LitData max_cache_size 50%", [550.0], "litdata", peer),
        _case(w8, "shards of 128: WebDataset, no cache", [520.0], "webdataset", peer),
    ]  # fmt: skip
    found = [(t["target"], t["measured"], t["met"]) for t in w8.targets(cases)]
    web, lit50 = "shards of 128: WebDataset, no cache", "shards of 128: LitData max_cache_size 50%"
    ours = "shards of 128: aioloader"
    block, shuffled = "BlockShuffledSampler(window=4)", "ShuffledSampler"
    b25, g25 = f"memory tier 25%, {block}", f"memory tier 25%, {shuffled}"
    b50, g50 = f"memory tier 50%, {block}", f"memory tier 50%, {shuffled}"
    speed, every = (
        "epochs 2-3 images/s >=",
        ">= 1.0x the same loader without a cache, in every epoch",
    )
    requests, e1, later = "requests per epoch <= 2x the shards (32)", "epoch 1 bytes", "epochs 2+"
    missing, failed, whole = "n/a (a row is missing)", "n/a (row failed)", "bytes per epoch <="
    expected = [
        (b25, f"{speed} 1.2x best peer", f"1.23x ({ours} {b25} 640 vs {web} 520)", True),
        (b25, every, "e1 1.03x, e2 1.12x, e3 0.93x", False),
        (b25, requests, "2.03x at most (40, 64, 65)", False),
        (b25, f"{e1} <= 1.02x dataset", "1.010x", True),
        (b25, f"{later} bytes <= 1.1x optimum", "1.120x (worst epoch)", False),
        (g25, f"{speed} 1.0x best peer", f"0.96x ({ours} {g25} 500 vs {web} 520)", False),
        (g25, every, "e1 1.07x, e2 1.67x, e3 1.67x", True),
        (g25, f"{e1} <= 1.02x dataset", "1.005x", True),
        (g25, f"{later} bytes <= 1.1x optimum", "1.010x (worst epoch)", True),
        (b50, f"{speed} 1.2x best peer", f"1.27x ({ours} {b50} 700 vs {lit50} 550)", True),
        (b50, every, "e1 1.05x, e2 1.75x, e3 1.71x", True),
        (b50, requests, "1.03x at most (33, 32, 32)", True),
        (b50, f"{e1} <= 1.02x dataset", "1.022x", False),
        (b50, f"{later} bytes <= 1.1x optimum", "0.667x (worst epoch)", True),
        (b50, f"{later[:-1]}-3 bytes <= 0.6x MosaicML's (50%)", "0.30x (186 vs 620 MB)", True),
        (g50, f"{speed} 1.0x best peer", missing, None),
        (g50, every, missing, None),
        (g50, "bytes per epoch", failed, None),
        (
            f"no cache, {block}",
            f"{whole} 1.05x the dataset",
            "e1 1.020x, e2 1.030x, e3 1.060x",
            False,
        ),
        (
            f"no cache, {shuffled}",
            f"{whole} 1.05x the dataset",
            "e1 1.000x, e2 1.005x, e3 1.010x",
            True,
        ),
    ]
    assert found == [
        (f"{head} {row}: {text}", measured, met) for row, text, measured, met in expected
    ]
    # the report's ratio of a cached row divides by the best peer of its shard size and cache
    assert [c.compare_to for c in cases[2:5]] == [web, web, lit50]


def test_the_shard_sizes_cut_every_format_alike() -> None:
    w8 = _module("workloads.w8_cache")
    cfg = w8.W8Config()
    assert [cfg.images // s for s in cfg.shard_samples] == [128, 32]
    assert w8.metric(3) == "epochs 2-3 images/s"
    args = SimpleNamespace(w8_images=1024, w8_shard_samples=(128,), w8_leave_out=("webdataset",))
    assert w8.config(False, args).images == 1024
    assert w8.config(False, args).peers == ("litdata", "mosaic")
