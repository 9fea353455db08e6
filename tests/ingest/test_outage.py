"""Ingestion through an outage: failures count toward a shard, so the resume point moves on.

The fetchers here never touch the network: an outage is a fetcher whose every fetch fails
(as a refused connection would), the recovery one whose every fetch succeeds. A run is
killed (cancelled) in the middle of a shard, as a crash would stop it, then resumed.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from aioloader.ingest import ingest
from aioloader.sinks import ShardRecord, read_failures, read_manifest
from aioloader.sources import FetchResult, HttpFetcher, RetryPolicy

pytestmark = pytest.mark.anyio


def _urls(total: int) -> list[str]:
    return [f"http://127.0.0.1:9/{position}.bin" for position in range(total)]


def _position(url: str) -> int:
    return int(url.rsplit("/", 1)[1].split(".", 1)[0])


class _Outage(HttpFetcher):
    """Every fetch fails as a refused connection; the ``kill_at``-th one cancels the run."""

    def __init__(self, kill_at: int, scope: anyio.CancelScope) -> None:
        super().__init__()
        self.calls = 0
        self._kill_at = kill_at
        self._scope = scope

    async def fetch(self, url: str) -> FetchResult:
        self.calls += 1
        if self.calls == self._kill_at:
            self._scope.cancel()
            await anyio.sleep_forever()
        return FetchResult(url, None, final_url=url, reason="connection", detail="refused")


class _Recovered(HttpFetcher):
    """Every fetch succeeds; the positions fetched are kept."""

    def __init__(self) -> None:
        super().__init__()
        self.positions: list[int] = []

    async def fetch(self, url: str) -> FetchResult:
        self.positions.append(_position(url))
        body = str(_position(url)).encode()
        return FetchResult(url, body, status=200, final_url=url)


@pytest.mark.parametrize(
    ("shard", "outage", "total"),
    [
        (100, 2_000 + 37, 2_300),  # the killing fetch: 37 inputs into the 21st shard
        pytest.param(1_000, 100_000 + 517, 103_000, marks=pytest.mark.slow),  # about 10 s
    ],
)
async def test_an_outage_commits_failures_and_a_resume_redoes_less_than_a_shard(
    tmp_path: Path, shard: int, outage: int, total: int
) -> None:
    urls = _urls(total)
    commits: list[ShardRecord] = []
    with anyio.CancelScope() as scope:
        fetcher = _Outage(outage, scope)
        await ingest(
            urls, tmp_path, fetcher=fetcher, shard_samples=shard, reorder_window=1,
            on_commit=commits.append,
        )  # fmt: skip
    assert scope.cancel_called
    handed_on = outage - 1  # inputs fetched before the killing fetch (the window holds 1)
    manifest = read_manifest(tmp_path)
    resume_point = manifest.end
    assert resume_point == handed_on // shard * shard == outage // shard * shard
    full = resume_point // shard
    assert [(r.first, r.end, r.samples, r.failed) for r in manifest.shards] == [
        (i * shard, (i + 1) * shard, 0, shard) for i in range(full)
    ]  # memory bound: a shard's failure records were committed as soon as they were `shard`
    assert [r.name for r in commits] == [r.name for r in manifest.shards]

    recovered = _Recovered()
    summary = await ingest(urls, tmp_path, fetcher=recovered, shard_samples=shard)
    assert summary.resumed_from == resume_point
    redone = [p for p in recovered.positions if p < handed_on]
    assert len(redone) == handed_on - resume_point < shard  # less than one shard's worth
    assert sorted(recovered.positions) == list(range(resume_point, total))

    failures = [f.position for f in read_failures(tmp_path)]
    manifest = read_manifest(tmp_path)
    assert failures == list(range(resume_point))  # nothing lost: the outage's records
    assert (manifest.end, manifest.total_samples) == (total, total - resume_point)
    assert (manifest.total_failed, manifest.input_end is not None) == (resume_point, True)


async def test_failures_and_samples_together_fill_a_shard(tmp_path: Path) -> None:
    """Every third input fails: each shard holds ``shard_samples`` records in all."""

    class _EveryThird(HttpFetcher):
        async def fetch(self, url: str) -> FetchResult:
            if _position(url) % 3 == 0:
                return FetchResult(url, None, final_url=url, reason="status", detail="HTTP 503")
            return FetchResult(url, b"x", status=200, final_url=url)

    urls = _urls(25)
    summary = await ingest(urls, tmp_path, fetcher=_EveryThird(), shard_samples=4)
    shards = read_manifest(tmp_path).shards
    assert [(r.first, r.end) for r in shards] == [(i, min(i + 4, 25)) for i in range(0, 25, 4)]
    assert [(r.samples, r.failed) for r in shards] == [
        (2, 2), (3, 1), (3, 1), (2, 2), (3, 1), (3, 1), (0, 1)
    ]  # fmt: skip
    assert (summary.ok, summary.failed) == (16, 9)


async def test_a_loopback_server_that_refuses_every_connection_still_moves_the_resume_point(
    tmp_path: Path,
) -> None:
    """The real fetcher against a loopback port nothing listens on: shards of failures."""
    from tests._support.s3 import free_ports

    (port,) = free_ports(1)
    urls = [f"http://127.0.0.1:{port}/{position}.jpg" for position in range(60)]
    fetcher = HttpFetcher(allow=["127.0.0.1"], retry=RetryPolicy(max_attempts=1))
    async with fetcher:
        summary = await ingest(urls, tmp_path, fetcher=fetcher, shard_samples=8)
    manifest = read_manifest(tmp_path)
    assert [(r.first, r.end, r.samples, r.failed) for r in manifest.shards] == [
        (i, min(i + 8, 60), 0, min(8, 60 - i)) for i in range(0, 60, 8)
    ]
    assert (summary.ok, summary.failed, summary.failures) == (0, 60, {"connection": 60})
    assert [f.position for f in read_failures(tmp_path)] == list(range(60))
