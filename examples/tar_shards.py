"""WebDataset-style tar shards read by byte ranges: a true global shuffle, no shuffle buffer."""

from __future__ import annotations

import io
import tarfile
import tempfile
from pathlib import Path

import anyio
import numpy as np

from aioloader import DataLoader, ShuffledSampler, TarShards
from aioloader.testing import StackCollator


def write_shards(directory: Path, shards: int, per_shard: int) -> list[Path]:
    paths = []
    for shard in range(shards):
        path = directory / f"shard-{shard:03d}.tar"
        with tarfile.open(path, "w") as archive:
            for item in range(per_shard):
                key = f"sample{shard * per_shard + item:06d}"
                for field, payload in (
                    ("npy", _npy(np.arange(4) + shard * per_shard + item)),
                    ("txt", f"caption {key}".encode()),
                ):
                    info = tarfile.TarInfo(f"{key}.{field}")
                    info.size = len(payload)
                    archive.addfile(info, io.BytesIO(payload))
        paths.append(path)
    return paths


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def decode(sample: dict[str, object], index: int) -> np.ndarray:
    data = sample["npy"]
    assert isinstance(data, bytes)
    return np.load(io.BytesIO(data), allow_pickle=False)


async def main(directory: Path, paths: list[Path]) -> None:
    source = TarShards(paths, index_dir=directory, decode=decode)  # index saved beside shards
    loader = DataLoader(source, ShuffledSampler(len(source), 16), StackCollator(), seed=5)
    async with loader.stream(0, 12) as batches:  # one epoch over all shards, fully shuffled
        async for batch in batches:
            assert np.array_equal(batch.data[:, 0], batch.indices)
    print(f"{len(source)} samples in {len(paths)} shards")


if __name__ == "__main__":
    folder = Path(tempfile.mkdtemp())
    shard_paths = write_shards(folder, shards=4, per_shard=50)
    anyio.run(main, folder, shard_paths)
    print("index files:", sorted(p.name for p in folder.glob("*.json")))
