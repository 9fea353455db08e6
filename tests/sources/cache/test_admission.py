"""Disk jobs behind the steps: a step does not await its disk writes while a server runs,
samples on their way to disk are served from memory, the jobs keep their order, a server
that ends finishes them, and past ``BYTES_BEHIND`` a step writes itself."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from aioloader.core import plan_batch
from aioloader.sources.cache import KnownFutureCache, _admission
from aioloader.sources.cache._disk import DiskTier
from aioloader.sources.cache._disk_folder import MARKER
from tests.sources.cache.helpers import SEED, LoggedShards, samplers, shard_blobs, want_of

BLOBS = shard_blobs()
WANT = want_of(BLOBS)
DATASET = sum(len(blob) for blob in BLOBS)


class GatedWrites:
    """``DiskTier.write`` held at a gate: the paths that began, in order, and those done."""

    def __init__(self) -> None:
        self.gate = anyio.Event()
        self.reached = anyio.Event()  # a write waits at the gate
        self.began: list[Path] = []
        self.done: list[Path] = []
        self._write = DiskTier.write

    async def write(self, path: Path, data: bytes) -> None:
        self.began.append(path)
        self.reached.set()
        await self.gate.wait()
        await self._write(path, data)
        self.done.append(path)


@dataclass
class Rig:
    """A block shuffle over a cache that reads nothing ahead, whose memory holds nothing
    and whose disk tier holds every sample (each used sample goes to disk), its disk
    writes gated; ``first``: step 0's samples."""

    writes: GatedWrites
    source: LoggedShards
    first: list[int]


@pytest.fixture
def rig(
    local_shards: tuple[list[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Rig:
    writes = GatedWrites()
    monkeypatch.setattr(DiskTier, "write", staticmethod(writes.write))
    paths, index = local_shards
    cache = KnownFutureCache(
        1, disk_dir=tmp_path / "disk", disk_bytes=2 * DATASET, lookahead_steps=0, fill_steps=0
    )
    source = LoggedShards(paths, index_dir=index, cache=cache)
    sampler = samplers()["block"]
    source.plan_reads(sampler, SEED, 0)
    return Rig(writes, source, [int(i) for i in plan_batch(sampler, SEED, 0).indices])


def _entries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MARKER)


@pytest.mark.anyio
async def test_a_step_goes_on_while_its_disk_writes_wait_behind_it(
    rig: Rig, tmp_path: Path
) -> None:
    writes, source, first = rig.writes, rig.source, rig.first
    async with anyio.create_task_group() as group:
        await group.start(source.serve_reads)
        got = await source.get_samples(first)  # returns with every write held at the gate
        assert [sample["bin"] for sample in got] == [WANT[i] for i in first]
        await writes.reached.wait()
        await anyio.wait_all_tasks_blocked()
        assert len(writes.began) == 1  # the first write of the chain, held
        assert writes.done == []
        assert _entries(tmp_path / "disk") == []
        requests = len(source.log)
        again = await source.get_samples(first)  # on their way to disk: served from memory
        assert [sample["bin"] for sample in again] == [WANT[i] for i in first]
        assert len(source.log) == requests
        group.cancel_scope.cancel()  # the server ends with the writes still held
        writes.gate.set()
    stats = source.cache.statistics()  # type: ignore[union-attr]
    written = _entries(tmp_path / "disk")
    assert written == sorted(writes.done)  # the ended server finished every write
    assert writes.began == writes.done  # one at a time, in the order decided
    assert len(written) == len(set(first))
    assert sum(p.stat().st_size for p in written) == stats.disk_bytes
    assert {DiskTier.read_now(p) for p in written} == {WANT[i] for i in first}


@pytest.mark.anyio
async def test_past_the_bytes_behind_a_step_runs_its_disk_writes_itself(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_admission, "BYTES_BEHIND", 0)
    writes, source, first = rig.writes, rig.source, rig.first
    got: list[Any] = []
    stepped = anyio.Event()

    async def step() -> None:
        got.extend(await source.get_samples(first))
        stepped.set()

    async with anyio.create_task_group() as group:
        await group.start(source.serve_reads)
        group.start_soon(step)
        await writes.reached.wait()
        await anyio.wait_all_tasks_blocked()
        assert not stepped.is_set()  # the step awaits its own writes
        assert len(writes.began) == 1
        writes.gate.set()
        await stepped.wait()
        assert writes.done == writes.began
        assert len(writes.done) == len(set(first))
        group.cancel_scope.cancel()
    assert [sample["bin"] for sample in got] == [WANT[i] for i in first]


@pytest.mark.anyio
async def test_without_a_server_a_step_runs_its_disk_writes_itself(
    rig: Rig, tmp_path: Path
) -> None:
    writes, source, first = rig.writes, rig.source, rig.first
    writes.gate.set()
    got = await source.get_samples(first)
    assert [sample["bin"] for sample in got] == [WANT[i] for i in first]
    assert len(writes.done) == len(set(first))  # all written before the call returned
    assert _entries(tmp_path / "disk") == sorted(writes.done)
