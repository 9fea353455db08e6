"""benchmarks/workloads/w8_cache.py: W8's byte accounting, exactly, and a tiny run of its rows."""

from __future__ import annotations

import contextlib
import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _benchmark_module(name: str) -> ModuleType:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module(name)


def test_optimum_and_ratios_are_exact() -> None:
    w8 = _benchmark_module("workloads.w8_cache")
    assert w8.cache_bytes(0.25, 1_000_003) == 250_000
    assert w8.optimum_bytes(0.25, 1_000_003) == 750_003
    epochs = [
        {"bytes": 1_020_000, "requests": 40, "images_per_s": 100.0},
        {"bytes": 825_003, "requests": 30, "images_per_s": 150.0},
        {"bytes": 750_003, "requests": 20, "images_per_s": 160.0},
    ]
    assert w8.epoch_facts(epochs, 1_000_003, 0.25) == {
        "dataset MB": 1.000003,
        "cache MB": 0.25,
        "optimum MB (epochs 2+)": 0.750003,
        "e1 MB": 1.02,
        "e1 requests": 40,
        "e1 images/s": 100.0,
        "e1 / dataset": 1.02,
        "e2 MB": 0.825003,
        "e2 requests": 30,
        "e2 images/s": 150.0,
        "e2 / optimum": 1.1,
        "e3 MB": 0.750003,
        "e3 requests": 20,
        "e3 images/s": 160.0,
        "e3 / optimum": 1.0,
        "all epochs / optimum": 1.038,  # 2,595,006 bytes / (1,000,003 + 2 x 750,003)
    }
    no_cache = w8.epoch_facts(epochs[:2], 1_000_003, None)
    assert (no_cache["cache MB"], no_cache["optimum MB (epochs 2+)"]) == (0.0, 1.000003)
    assert no_cache["e2 / optimum"] == 0.825
    assert no_cache["all epochs / optimum"] == 0.922  # 1,845,003 / 2,000,006
    marks = [
        {"requests": 5, "bytes_to_client": 100, "time": 10.0},
        {"requests": 9, "bytes_to_client": 1100, "time": 12.0},
        {"requests": 10, "bytes_to_client": 1600, "time": 16.0},
    ]
    assert w8.per_epoch(marks, 64) == [
        {"bytes": 1000, "requests": 4, "seconds": 2.0, "images_per_s": 32.0},
        {"bytes": 500, "requests": 1, "seconds": 4.0, "images_per_s": 16.0},
    ]
    timed = [{**mark, "cpu": cpu} for mark, cpu in zip(marks, (1.0, 1.5, 1.75), strict=True)]
    assert [e["cpu_per_1k"] for e in w8.per_epoch(timed, 64)] == [7.8125, 3.90625]
    assert w8.later_speed(w8.per_epoch(marks, 64), 64) == 16.0  # 64 images / 4 s


def test_config_is_checked() -> None:
    w8 = _benchmark_module("workloads.w8_cache")
    with pytest.raises(ValueError, match=r"images must be a multiple of batch \(64\).*got 100"):
        w8.W8Config(images=100)
    with pytest.raises(ValueError, match=r"shard size \(32, 128\) .*but got 4032"):
        w8.W8Config(images=4032)  # 63 x 64: not whole shards of 128
    with pytest.raises(ValueError, match=r"W8Config.epochs must be >= 2 .* but got 1"):
        w8.W8Config(epochs=1)
    with pytest.raises(ValueError, match=r"W8Config.peers must be one or more of .* got \('x',\)"):
        w8.W8Config(peers=("x",))
    with pytest.raises(ValueError, match=r"W8Config.tiers must be one or more of .* got \(\)"):
        w8.W8Config(tiers=())


def test_w8_is_named_only() -> None:
    run = _benchmark_module("run")
    assert "W8" in run.WORKLOADS
    assert "W8" not in run.parse_args([]).workloads
    assert run.parse_args(["--workloads", "W8", "--w8-images", "1024"]).w8_images == 1024
    with pytest.raises(SystemExit):
        run.parse_args(["--workloads", "W8", "--w8-images", "1000"])


@pytest.mark.slow  # a benchmark smoke run
def test_a_tiny_run_of_the_aioloader_rows_adds_up(tmp_path: Path) -> None:
    w8 = _benchmark_module("workloads.w8_cache")
    cfg = w8.W8Config(images=64, batch=16, shard_samples=(16,), fractions=(0.5,), peers=())
    log: list[str] = []
    with contextlib.ExitStack() as stack:
        cases = w8.cases(cfg, log.append, stack)
        names = [case.system for case in cases]
        assert names == [
            "shards of 16: aioloader no cache, BlockShuffledSampler(window=4)",
            "shards of 16: aioloader no cache, ShuffledSampler",
            "shards of 16: aioloader memory tier 50%, BlockShuffledSampler(window=4)",
            "shards of 16: aioloader memory tier 50%, ShuffledSampler",
            "shards of 16: aioloader disk tier 50%, BlockShuffledSampler(window=4)",
            "shards of 16: aioloader disk tier 50%, ShuffledSampler",
        ]
        assert [case.error for case in cases] == [None] * 6
        block = cases[2]
        block.measure()  # the checking epoch (warm-up)
        assert block.facts == {"shard samples": 16, "shards": 4}
        images_per_s = block.measure()
    facts = block.facts
    tars = w8.prepare(cfg, 16, log.append)["tar"]
    dataset = sum(p.stat().st_size for p in tars.glob("*.tar"))
    assert facts["dataset MB"] == dataset / 1e6
    assert facts["cache MB"] == int(0.5 * dataset) / 1e6
    assert facts["optimum MB (epochs 2+)"] == (dataset - int(0.5 * dataset)) / 1e6
    seconds = 64 / facts["e2 images/s"] + 64 / facts["e3 images/s"]
    assert images_per_s == pytest.approx(2 * 64 / seconds, rel=1e-12)  # epochs 2-3 together
    assert facts["e2 S3 CPU-s/1k images"] >= 0
    assert facts["e1 / dataset"] == round(facts["e1 MB"] * 1e6 / dataset, 3)
    for epoch in (2, 3):
        optimum = dataset - int(0.5 * dataset)
        assert facts[f"e{epoch} / optimum"] == round(facts[f"e{epoch} MB"] * 1e6 / optimum, 3)
    fewest = dataset + 2 * (dataset - int(0.5 * dataset))
    fetched = sum(facts[f"e{n} MB"] for n in (1, 2, 3)) * 1e6
    assert facts["all epochs / optimum"] == round(fetched / fewest, 3)
    assert facts["same samples"] == "yes"
    # The relay counts every GET of the cache plus one listing of the shards' folder (the
    # saved indices are checked against the shards' sizes and ETags), and their bytes plus
    # HTTP headers.
    stats = block.facts["cache"]
    gets = int(stats.split(" GETs")[0].rsplit(", ", 1)[1].replace(",", ""))
    requests = sum(facts[f"e{n} requests"] for n in (1, 2, 3))
    assert requests == gets + 1
    total = sum(facts[f"e{n} MB"] for n in (1, 2, 3)) * 1e6
    assert total >= dataset  # every byte of the dataset at least once
