"""Built-in datasets: ``MemoryDataset`` (samples held in a list) and the synthetic workloads
of the demo, the quickstart and the benchmarks.

The test doubles of ``aioloader.testing`` build on these; nothing here imports them.

>>> import anyio
>>> dataset = line_images(count=4, height=2, min_width=3, max_width=5)
>>> len(dataset), anyio.run(dataset.get_sample, 0).image.shape[:2]
(4, (1, 2))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

import numpy as np

from .core import ImageSample

__all__ = ("MemoryDataset", "line_images")

SampleT = TypeVar("SampleT")


class MemoryDataset(Generic[SampleT]):
    """Samples held in a list; reads complete at once (the engine's cost alone)."""

    def __init__(self, samples: Sequence[SampleT]) -> None:
        self._samples = list(samples)

    def __len__(self) -> int:
        return len(self._samples)

    async def get_sample(self, index: int) -> SampleT:
        """The sample at ``index``."""
        return self._samples[index]

    async def get_samples(self, indices: Sequence[int]) -> list[SampleT]:
        """The samples at ``indices``, in order, in one call."""
        return list(map(self._samples.__getitem__, indices))


def line_images(
    count: int = 2048,
    height: int = 32,
    min_width: int = 64,
    max_width: int = 256,
    seed: int = 0,
) -> MemoryDataset[ImageSample]:
    """The synthetic line-image workload (W1): ``count`` images ``[1, height, W]``.

    Widths are uniform in ``[min_width, max_width]``; pixels, targets (1 to 12 integers in
    ``[1, 80)``) and labels (``index % 10``) come from ``numpy.random.default_rng(seed)``,
    so the same arguments give the same dataset.
    """
    generator = np.random.default_rng(seed)
    widths = generator.integers(min_width, max_width + 1, size=count)
    samples = []
    for index, width in enumerate(widths.tolist()):
        image = generator.random((1, height, width), dtype=np.float32)
        target = generator.integers(1, 80, size=1 + index % 12).astype(np.int32)
        samples.append(ImageSample(image, target, index % 10))
    return MemoryDataset(samples)
