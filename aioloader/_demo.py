"""The README's main job: stream the line-image workload (docs/benchmarks.md, W1), report."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import anyio

from ._progress import Progress
from .core._digest import digest_batch
from .core._samplers import ShuffledSampler
from .engine._loader import DataLoader
from .testing import line_images


@dataclass(frozen=True)
class DemoResult:
    """What one demo run measured."""

    steps: int
    seconds: float
    wait_seconds: float
    digest: str

    @property
    def batches_per_second(self) -> float:
        """Batches delivered per second of wall time."""
        return self.steps / self.seconds if self.seconds else 0.0

    @property
    def wait_share(self) -> float:
        """Fraction of the run the consumer spent waiting for a batch."""
        return self.wait_seconds / self.seconds if self.seconds else 0.0


def make_demo_loader(
    *, seed: int, workers: int, prefetch: int, start_step: int = 0
) -> DataLoader[Any, Any]:
    """The W1 workload: 2,048 line images, batch 128, width multiple 4, gain and offset."""
    from .core._images import GainOffset, ImageBatchCollator

    return DataLoader(
        line_images(),
        ShuffledSampler(2048, 128),
        ImageBatchCollator(width_multiple=4, augment=GainOffset()),
        seed=seed,
        workers=workers,
        prefetch=prefetch,
        start_step=start_step,
    )


async def run_demo(
    loader: DataLoader[Any, Any], start: int, steps: int, digest: bool, progress: bool
) -> DemoResult:
    """Consume ``steps`` batches from ``start``, hashing each one if ``digest``."""
    import hashlib

    combined = hashlib.sha256()
    bar = Progress(steps, "batches") if progress else None
    done = 0
    started = time.perf_counter()
    async with loader.stream(start, start + steps) as batches:
        async for batch in batches:
            with batch:
                if digest:
                    combined.update(digest_batch(batch).encode())
            done += 1
            if bar is not None:
                bar.advance()
    seconds = time.perf_counter() - started
    stats = loader.statistics()
    return DemoResult(steps, seconds, stats.consumer_wait_seconds, combined.hexdigest())


def demo_main(
    *,
    workers: int,
    prefetch: int,
    steps: int,
    start_step: int,
    seed: int,
    backend: str,
    digest: bool,
    progress: bool,
) -> DemoResult:
    """Build the demo loader, run it on ``backend`` and return what it measured."""
    loader = make_demo_loader(seed=seed, workers=workers, prefetch=prefetch)
    name, options = _backend(backend)
    return anyio.run(
        run_demo, loader, start_step, steps, digest, progress, backend=name, backend_options=options
    )


def _backend(backend: str) -> tuple[str, dict[str, Any]]:
    if backend == "uvloop":
        return "asyncio", {"use_uvloop": True}
    return backend, {}
