"""aioloader.ingest._memory: the C heap's free pages go back to the system after each shard."""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aioloader.ingest import _pipeline, ingest
from aioloader.ingest._memory import heap_trimmer
from aioloader.sinks import read_manifest
from aioloader.sources import HttpFetcher
from tests._support.http_server import HttpTestServer


@pytest.fixture(scope="module")
def server() -> Iterator[HttpTestServer]:
    with HttpTestServer(error_rate=0.0, seed=4) as running:
        yield running


def test_the_trimmer_gives_freed_pages_back_on_glibc_only() -> None:
    trim = heap_trimmer()
    if platform.libc_ver()[0] != "glibc":
        assert trim is None
        return
    assert trim is not None
    blocks = [bytearray(4096) for _ in range(8192)]  # 32 MiB from malloc's heap
    kept = blocks[::16]  # every 16th stays: the freed ones between are holes
    del blocks
    assert trim() is True  # pages inside the holes went back
    assert len(kept) == 512


@pytest.mark.anyio
async def test_the_job_trims_the_heap_once_after_each_shard_it_commits(
    server: HttpTestServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def counting() -> Callable[[], bool]:
        def trim() -> bool:
            calls.append(len(read_manifest(tmp_path).shards))  # after the commit
            return True

        return trim

    monkeypatch.setattr(_pipeline, "heap_trimmer", counting)
    urls = [server.url(f"/img/{i}.jpg") for i in range(40)]
    async with HttpFetcher(allow=("127.0.0.1",), content_types=("image/",)) as fetcher:
        summary = await ingest(urls, tmp_path, fetcher=fetcher, shard_samples=8)
    assert summary.ok == 40
    assert summary.shards == 5
    assert calls == [1, 2, 3, 4, 5]  # each just after its commit (at its 8th sample)
