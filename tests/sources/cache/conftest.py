"""Fixtures of the cache tests: the shards of ``helpers`` as local files."""

from __future__ import annotations

from pathlib import Path

import pytest

from aioloader.sources._tar import TarShards
from tests.sources.cache.helpers import shard_blobs


@pytest.fixture
def local_shards(tmp_path: Path) -> tuple[list[str], Path]:
    """``helpers.shard_blobs()`` as local files, and a folder of their saved indices (so
    that a cache built over them starts empty: indexing reads nothing it could offer)."""
    folder, index = tmp_path / "shards", tmp_path / "index"
    folder.mkdir()
    for s, blob in enumerate(shard_blobs()):
        (folder / f"shard-{s:02d}.tar").write_bytes(blob)
    paths = [str(p) for p in sorted(folder.glob("*.tar"))]
    TarShards(paths, index_dir=index)
    return paths, index
