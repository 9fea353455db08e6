"""Built-in synthetic datasets: the workloads of the demo, the quickstart and the benchmarks.

>>> import anyio
>>> dataset = line_images(count=4, height=2, min_width=3, max_width=5)
>>> len(dataset), anyio.run(dataset.get_sample, 0).image.shape[:2]
(4, (1, 2))
"""

from __future__ import annotations

import numpy as np

from .core._images import ImageSample
from .testing import MemoryDataset

__all__ = ("line_images",)


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
