"""benchmarks/workloads/w6_*: the W6 data, the exactly-once check, tar shards of every sample."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[2]


def _benchmark_module(name: str) -> ModuleType:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module(name)


def test_w6_data_is_seeded_jpegs_of_40_to_100_kb(tmp_path: Path) -> None:
    w6_data = _benchmark_module("workloads.w6_data")
    folder = w6_data.generate(tmp_path, 3, seed=5)
    sizes = [len(w6_data.read_jpeg(folder, i)) for i in range(3)]
    assert all(40_000 <= size <= 100_000 for size in sizes), sizes
    assert w6_data.read_jpeg(folder, 1) == w6_data.make_jpeg(1, 5)  # a function of (seed, i)
    assert w6_data.make_jpeg(1, 6) != w6_data.make_jpeg(1, 5)
    assert w6_data.dataset_bytes(folder) == sum(sizes)
    tensor = w6_data.preprocess(w6_data.read_jpeg(folder, 0))
    assert (tensor.shape, tensor.dtype.name, tensor.flags.c_contiguous) == (
        (3, 224, 224),
        "float32",
        True,
    )
    batch = w6_data.collate([tensor, tensor], [w6_data.label_of(0), w6_data.label_of(3)], [0, 3])
    assert batch["image"].shape == (2, 3, 224, 224)
    assert batch["label"].tolist() == [0, 3 * 7919 % 1000]


def test_w6_exactly_once_names_what_went_wrong() -> None:
    w6_data = _benchmark_module("workloads.w6_data")
    assert w6_data.exactly_once([2, 0, 3, 1], 4) == "yes"
    assert w6_data.exactly_once([0, 1, 1, 3], 4) == "NO: 1 missing, 1 repeated, 0 unknown"
    assert w6_data.exactly_once([0, 1, 2, 3, 9], 4) == "NO: 0 missing, 0 repeated, 1 unknown"


def test_w6_is_named_only_and_its_tar_shards_hold_every_sample_once(tmp_path: Path) -> None:
    run = _benchmark_module("run")
    assert "W6" in run.WORKLOADS
    assert "W6" not in run.parse_args([]).workloads  # minutes and peers: only when named
    w6_data = _benchmark_module("workloads.w6_data")
    folder = w6_data.generate(tmp_path, 3, seed=5)
    shards = w6_data.write_webdataset(folder, 3, tmp_path / "wds")
    from aioloader import TarShards

    source: Any = TarShards(shards)
    ids = [int(anyio.run(source.get_sample, i)["id"]) for i in range(len(source))]
    assert w6_data.exactly_once(ids, 3) == "yes"
    assert anyio.run(source.get_sample, 2)["jpg"] == w6_data.read_jpeg(folder, 2)
    assert int(anyio.run(source.get_sample, 2)["cls"]) == w6_data.label_of(2)
