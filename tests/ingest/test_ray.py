"""ingest_on_ray on a local Ray runtime (loopback only, 2 CPUs) against the single-process run."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from aioloader.ingest import (
    ImageOptions,
    IngestSummary,
    ingest,
    ingest_on_ray,
    merge_parts,
    part_name,
)
from aioloader.sinks import open_shards, read_failures, read_manifest
from aioloader.sources import HttpFetcher, RetryPolicy
from tests._support.http_server import HttpTestServer

pytestmark = pytest.mark.slow  # a local Ray runtime starts in tens of seconds

URLS = 60
FETCH: dict[str, Any] = {
    "read_timeout": 0.5,
    "retry": RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.02),
    "max_in_flight": 16,
    "max_per_host": 16,
    "allow": ["127.0.0.1"],
}
OPTIONS: dict[str, Any] = {
    "image": ImageOptions(size=32, resize_mode="center_crop"),
    "shard_samples": 8,
    "threads": 1,
}


@pytest.fixture(scope="module")
def ray_runtime() -> Iterator[None]:
    """A local Ray runtime on 127.0.0.1 with 2 CPUs, no dashboard, no usage report."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def server() -> Iterator[HttpTestServer]:
    with HttpTestServer(error_rate=0.1, seed=3) as running:
        yield running


def _output_set(folder: Path) -> tuple[dict[str, dict[str, bytes]], set[tuple[Any, ...]]]:
    """Every sample (key -> members) and every failure (position, reason, key, url)."""
    shards = open_shards(folder)

    async def read_all() -> list[Any]:
        return await shards.get_samples(range(len(shards)))

    samples = {
        s["__key__"]: {k: v for k, v in s.items() if k != "__key__"} for s in anyio.run(read_all)
    }
    failures = {(f.position, f.reason, f.key, f.extra.get("url")) for f in read_failures(folder)}
    return samples, failures


def test_ray_output_set_equals_the_single_process_run(
    ray_runtime: None, server: HttpTestServer, tmp_path: Path
) -> None:
    urls = [server.url(f"/img/{n}.jpg") for n in range(URLS)]
    single, spread = tmp_path / "single", tmp_path / "ray"

    async def one_process() -> IngestSummary:
        async with HttpFetcher(**FETCH) as fetcher:
            return await ingest(urls, single, fetcher=fetcher, **OPTIONS)

    alone = anyio.run(one_process)
    summary = ingest_on_ray(urls, spread, parts=3, fetcher_options=FETCH, **OPTIONS)

    assert (summary.ok, summary.failed, summary.resumed_from) == (alone.ok, alone.failed, 0)
    assert summary.failed > 0  # the server's faults reached both runs
    samples, failures = _output_set(spread)
    assert (samples, failures) == _output_set(single)
    positions = sorted([p for p, *_ in failures] + [int(k) for k in samples])
    assert positions == list(range(URLS))  # every input once: a sample or a failure record
    merged = read_manifest(spread)
    assert merged.meta["parts"] == [part_name(i) for i in range(3)]
    assert {r.name.split("/")[0] for r in merged.shards} == set(merged.meta["parts"])
    spans = [(r.first, r.end) for r in merged.shards]
    assert spans[0][0] == 0
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # no gap, no overlap
    assert merged.end == URLS


def test_ray_run_resumes_a_part_killed_before_its_last_commit(
    ray_runtime: None, server: HttpTestServer, tmp_path: Path
) -> None:
    urls = [server.url(f"/img/{n}.jpg") for n in range(URLS)]
    spread = tmp_path / "ray"
    ingest_on_ray(urls, spread, parts=3, fetcher_options=FETCH, **OPTIONS)
    expected = _output_set(spread)
    part = spread / part_name(1)  # as a task killed before it committed its last shard
    manifest = read_manifest(part)
    lost = manifest.shards[-1]
    cut = dataclasses.replace(manifest, shards=manifest.shards[:-1], input_end=None)
    (part / "manifest.json").write_text(cut.to_json())
    (spread / "manifest.json").unlink()

    again = ingest_on_ray(urls, spread, parts=3, fetcher_options=FETCH, **OPTIONS)

    lost_inputs = (lost.end or 0) - (lost.first or 0)
    assert lost_inputs > 0
    assert (again.ok + again.failed, again.resumed_from) == (lost_inputs, URLS - lost_inputs)
    assert _output_set(spread) == expected  # no duplicate, no gap
    done = ingest_on_ray(urls, spread, parts=3, fetcher_options=FETCH, **OPTIONS)
    assert (done.ok, done.failed, done.resumed_from) == (0, 0, URLS)


def test_ray_reads_an_input_file_in_every_task(
    ray_runtime: None, server: HttpTestServer, tmp_path: Path
) -> None:
    urls = [server.url(f"/img/{n}.jpg") for n in range(12)]
    listed = tmp_path / "urls.txt"
    listed.write_text("\n".join(urls) + "\n")
    from_file, from_list = tmp_path / "file", tmp_path / "list"
    summary = ingest_on_ray(listed, from_file, parts=2, fetcher_options=FETCH, **OPTIONS)
    ingest_on_ray(urls, from_list, parts=1, fetcher_options=FETCH, **OPTIONS)

    assert summary.ok + summary.failed == 12
    assert read_manifest(from_file).meta["inputs"] == str(listed)
    assert _output_set(from_file) == _output_set(from_list)


def test_merge_parts_refuses_a_gap(tmp_path: Path) -> None:
    for index, (first, end) in enumerate([(0, 4), (5, 8)]):
        folder = tmp_path / part_name(index)
        folder.mkdir()
        shard = {"name": "shard-000000.tar", "samples": end - first, "bytes": 0,
                 "sha256": "", "first": first, "end": end}  # fmt: skip
        document = {"format": "aioloader-shards", "version": 1, "meta": {}, "shards": [shard]}
        (folder / "manifest.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match="must continue at input position 4 but its shard"):
        merge_parts(tmp_path, [part_name(0), part_name(1)])
    assert not (tmp_path / "manifest.json").exists()


def test_ingest_on_ray_refuses_options_it_sets(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="sets 'start' itself"):
        ingest_on_ray(["http://127.0.0.1:1/a"], tmp_path, start=3)


@pytest.mark.parametrize(
    ("parts", "inputs_per_part", "error", "message"),
    [
        (0, 10, ValueError, r"^parts must be an integer >= 1 or None but got 0$"),
        (True, 10, TypeError, r"^parts must be an integer >= 1 or None but got a bool \(True\)$"),
        (None, 0, ValueError, r"^inputs_per_part must be an integer >= 1 but got 0$"),
        (None, 2.5, TypeError, r"^inputs_per_part must be an integer >= 1 but got float \(2\.5\)$"),
    ],
)
def test_part_counts_are_checked_by_name(
    tmp_path: Path, parts: Any, inputs_per_part: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        ingest_on_ray(
            ["http://127.0.0.1:1/a"], tmp_path, parts=parts, inputs_per_part=inputs_per_part
        )
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("cpus", "error", "message"),
    [
        (True, TypeError, r"^cpus_per_part must be a number > 0 but got bool \(True\)$"),
        ("1", TypeError, r"^cpus_per_part must be a number > 0 but got str \('1'\)$"),
        (0, ValueError, r"^cpus_per_part must be a number > 0 but got 0$"),
    ],
)
def test_cpus_per_part_is_a_number_not_a_bool(
    tmp_path: Path, cpus: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        ingest_on_ray(["http://127.0.0.1:1/a"], tmp_path, cpus_per_part=cpus)
    assert os.listdir(tmp_path) == []
