"""JpegCropResize as a loader transform: batches are a pure function of (seed, step)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from aioloader import DataLoader, JpegCropResize, LocalFiles, ShuffledSampler, TreeCollator
from aioloader.core import SampleRng, digest_batch, plan_batch

pytestmark = pytest.mark.anyio

SEED = 34
CHAIN = JpegCropResize(size=24, crop=(30, 44), flip=True)


def write_jpegs(folder: Path, count: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    files = []
    for index in range(count):
        pixels = rng.integers(0, 256, (40 + index, 60 - index, 3), dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=85)
        (folder / f"{index:03d}.jpg").write_bytes(buffer.getvalue())
        files.append(buffer.getvalue())
    return files


@pytest.mark.parametrize("workers", [0, 2])
async def test_the_chain_as_a_transform_gives_the_batches_built_by_hand(
    tmp_path: Path, workers: int
) -> None:
    files = write_jpegs(tmp_path, 12)
    sampler = ShuffledSampler(12, 4)
    loader = DataLoader(
        LocalFiles(tmp_path), sampler, TreeCollator(), seed=SEED, transform=CHAIN, workers=workers
    )
    async with loader.stream(0, 6) as batches:
        got = [(batch.data.shape, digest_batch(batch.data)) async for batch in batches]
    expected = []
    for step in range(6):
        plan = plan_batch(sampler, SEED, step)
        keys = plan.transform_keys().tolist()
        images = [CHAIN(files[i], SampleRng(k)) for i, k in zip(plan.indices, keys, strict=True)]
        expected.append(((4, 24, 24, 3), digest_batch(np.stack(images))))
    assert got == expected
