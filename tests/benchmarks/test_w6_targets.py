"""benchmarks/workloads/w6_*.py: W6L's configuration (shards of 64 MB in every format), tars
cut by bytes, and issue 35's W6 targets from made-up results (exact verdicts)."""

from __future__ import annotations

import contextlib
import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str) -> ModuleType:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module(name)


def test_w6l_is_named_only_and_reads_shards_of_64_mb_on_the_relayed_path() -> None:
    run, w6, w6l = (
        _module("run"),
        _module("workloads.w6_object_storage"),
        _module("workloads.w6_large"),
    )
    assert "W6L" in run.WORKLOADS
    assert "W6L" not in run.parse_args([]).workloads
    assert run.parse_args(["--workloads", "w6l,w6"]).workloads == ["W6", "W6L"]
    cfg = w6l.config(False)
    assert (cfg.images, cfg.shard_bytes, cfg.direct) == (4096, 64_000_000, False)
    assert (cfg.workload, cfg.on_the_fly) == ("W6L", False)
    assert w6l.config(True).shard_bytes == 8_000_000
    names = [name for name, _ in w6.rows(cfg, True, ["k"], "/index", 1000)]
    assert names == [
        "WebDataset, 2 workers",
        "LitData, 2 workers",
        "MosaicML Streaming, 2 workers",
        "aioloader TarShards, global shuffle, 2 threads, 256 reads in flight",
        w6.GLOBAL_CACHED,
        "aioloader TarShards, block shuffle (window 4 shards)",
        w6.BLOCK_CACHED,
        "aioloader TarShards, block shuffle (window 4 pieces of 256)",
        w6.PIECES_CACHED,
    ]
    pieces = dict(w6.rows(cfg, True, ["k"], "/index", 1000))[w6.PIECES_CACHED]
    assert (pieces["sampler"], pieces["window"], pieces["piece"]) == ("block", 4, 256)
    assert w6l.config(True).piece == 32
    direct = [name for name, _ in w6.rows(w6.W6Config(), False, ["k"], "/index", 1000)]
    assert direct == [*names[:4], names[5]]  # the repository's W6 read directly: no cache


def test_tars_cut_by_bytes_end_at_the_first_sample_past_the_limit(tmp_path: Path) -> None:
    w6_data = _module("workloads.w6_data")
    folder = w6_data.generate(tmp_path, 6, seed=5)
    limit = 150_000
    shards = w6_data.write_webdataset(folder, 6, tmp_path / "tar", 6, limit)
    sizes = [p.stat().st_size for p in shards]
    assert all(size >= limit for size in sizes[:-1]), sizes
    assert all(size < limit + 110_000 for size in sizes), sizes  # one sample more at most
    assert w6_data.shard_files(tmp_path / "tar") == shards
    from aioloader import TarShards

    source: Any = TarShards(shards)
    ids = [int(anyio.run(source.get_sample, i)["id"]) for i in range(len(source))]
    assert w6_data.exactly_once(ids, 6) == "yes"


def _case(w6: ModuleType, name: str, group: str, value: float, **facts: Any) -> Any:
    case = w6.Case("W6L", name, "images/s", lambda: 0.0, group=group, facts=facts)
    case.values = [value]
    return case


def test_w6_targets_give_exact_verdicts_from_made_up_results() -> None:
    w6, w6l = _module("workloads.w6_object_storage"), _module("workloads.w6_large")
    first, resume, cpu = (
        "first batch s",
        "first batch after resume at 75% s",
        "S3 CPU-s per 1k images",
    )

    def row(name: str, group: str, value: float, *timings: float, **more: Any) -> Any:
        facts = dict(zip((first, resume, cpu), timings, strict=True))
        return _case(w6, f"+20 ms: {name}", group, value, **facts, **more)

    web, lit = "+20 ms: WebDataset, 2 workers", "+20 ms: LitData, 2 workers"
    global_row = "aioloader TarShards, global shuffle, 2 threads, 256 reads in flight"
    block_row = "aioloader TarShards, block shuffle (window 4 shards)"
    cases = [
        row("WebDataset, 2 workers", "webdataset", 500, 0.6, 0.5, 0.18, **{"requests/epoch": 5}),
        row("LitData, 2 workers", "litdata", 560, 1.0, 0.8, 0.17),
        row("MosaicML Streaming, 2 workers", "mosaic", 460, 1.2, 0.9, 0.2),
        row(global_row, "aioloader", 384, 0.5, 0.6, 0.8),
        row(w6.GLOBAL_CACHED, "aioloader", 420, 0.3, 0.5, 0.5),
        row(block_row, "aioloader", 362, 0.4, 0.4, 0.9),
        row(w6.BLOCK_CACHED, "aioloader", 700, 0.33, 0.4, 0.1, shards=5, **{"requests/epoch": 7}),
        row(w6.PIECES_CACHED, "aioloader", 600, 0.3, 0.3, 0.1, pieces=16, **{"requests/epoch": 30}),
        _case(w6, "direct: LitData, 2 workers", "litdata", 9000),  # not the +20 ms path
    ]
    found = [(t["target"], t["measured"], t["met"]) for t in w6l.targets(cases)]
    block, glob, pieces = w6.BLOCK_CACHED, w6.GLOBAL_CACHED, w6.PIECES_CACHED
    assert found == [
        (
            "W6L: block shuffle + cache images/s >= 1.2x best peer",
            f"1.25x (+20 ms: {block} 700 vs {lit} 560)",
            True,
        ),
        (
            "W6L: block over pieces + cache images/s >= 1.2x best peer",
            f"1.07x (+20 ms: {pieces} 600 vs {lit} 560)",
            False,
        ),
        (
            "W6L: global shuffle images/s >= 1.0x best peer",
            f"0.75x (+20 ms: {glob} 420 vs {lit} 560)",
            False,
        ),
        (f"W6L: {glob}: first batch <= 0.6x best peer", f"0.50x (0.3 s vs {web} 0.6 s)", True),
        (f"W6L: {block}: first batch <= 0.6x best peer", f"0.55x (0.33 s vs {web} 0.6 s)", True),
        (f"W6L: {pieces}: first batch <= 0.6x best peer", f"0.50x (0.3 s vs {web} 0.6 s)", True),
        (
            f"W6L: {glob}: first batch after resume at 75% <= 0.6x best peer",
            f"0.62x (0.5 s vs {lit} 0.8 s)",  # WebDataset has no resume: left out
            False,
        ),
        (
            f"W6L: {block}: first batch after resume at 75% <= 0.6x best peer",
            f"0.50x (0.4 s vs {lit} 0.8 s)",
            True,
        ),
        (
            f"W6L: {pieces}: first batch after resume at 75% <= 0.6x best peer",
            f"0.37x (0.3 s vs {lit} 0.8 s)",
            True,
        ),
        (
            f"W6L: {global_row}: S3 CPU per 1,000 images <= best peer's",
            f"4.71x (0.8 s vs {lit} 0.17 s)",
            False,
        ),
        (
            f"W6L: {glob}: S3 CPU per 1,000 images <= best peer's",
            f"2.94x (0.5 s vs {lit} 0.17 s)",
            False,
        ),
        (
            f"W6L: {block_row}: S3 CPU per 1,000 images <= best peer's",
            f"5.29x (0.9 s vs {lit} 0.17 s)",
            False,
        ),
        (
            f"W6L: {block}: S3 CPU per 1,000 images <= best peer's",
            f"0.59x (0.1 s vs {lit} 0.17 s)",
            True,
        ),
        (
            f"W6L: {pieces}: S3 CPU per 1,000 images <= best peer's",
            f"0.59x (0.1 s vs {lit} 0.17 s)",
            True,
        ),
        (
            "W6L: block shuffle + cache requests/epoch <= 1.5x the number of shards",
            f"7 requests for 5 shards (1.40x); fewest of the peers: {web} 5",
            True,
        ),
        (
            "W6L: block over pieces + cache requests/epoch <= 1.5x the number of pieces",
            f"30 requests for 16 pieces (1.88x); fewest of the peers: {web} 5",
            False,
        ),
    ]
    assert w6.targets(cases) == []  # W6's own targets see only W6's rows


@pytest.mark.slow  # a benchmark smoke run: SeaweedFS, one row's child process
def test_a_tiny_w6l_run_reads_shards_cut_by_bytes() -> None:
    w6 = _module("workloads.w6_object_storage")
    cfg = w6.W6Config(
        images=64, batch=16, direct=False, shard_bytes=1_000_000, on_the_fly=False, workload="W6L"
    )
    log: list[str] = []
    with contextlib.ExitStack() as stack:
        cases = {case.system: case for case in w6.cases(cfg, log.append, stack)}
        assert [name for name in cases if "aioloader" in name] == [
            "+20 ms: aioloader TarShards, global shuffle, 2 threads, 256 reads in flight",
            f"+20 ms: {w6.GLOBAL_CACHED}",
            "+20 ms: aioloader TarShards, block shuffle (window 4 shards)",
            f"+20 ms: {w6.BLOCK_CACHED}",
        ]
        block = cases[f"+20 ms: {w6.BLOCK_CACHED}"]
        assert {c.workload for c in cases.values()} == {"W6L"}
        assert block.error is None
        assert block.measure() > 0
    facts = block.facts
    assert facts["shards"] == 4  # 4.3 MB of tars cut at the first sample past 1 MB
    assert (facts["exactly once"], facts["resume"]) == ("yes", "DataLoader.load_state_dict")
    assert facts["requests/epoch"] >= facts["shards"]
