"""``aioloader demo``: stream the line-image workload and print what was measured."""

from __future__ import annotations

import argparse
import hashlib
import time
from dataclasses import dataclass
from typing import Any

import anyio

from .._progress import Progress
from ..core._digest import digest_batch
from ..core._samplers import ShuffledSampler
from ..engine._loader import DataLoader
from ._arguments import BACKENDS, backend_arguments, default_backend, non_negative, positive

WORKERS = 0
PREFETCH = 8
"""The fastest W1 setting measured in the README's performance table (with uvloop)."""


@dataclass(frozen=True)
class DemoResult:
    """What one pass over the demo's steps measured."""

    steps: int
    seconds: float
    wait_seconds: float
    digest: str | None

    @property
    def batches_per_second(self) -> float:
        """Batches delivered per second of wall time."""
        return self.steps / self.seconds if self.seconds else 0.0

    @property
    def wait_share(self) -> float:
        """Fraction of the pass the consumer spent waiting for a batch."""
        return self.wait_seconds / self.seconds if self.seconds else 0.0


def make_demo_loader(
    *, seed: int, workers: int, prefetch: int, start_step: int = 0
) -> DataLoader[Any, Any]:
    """W1: 2,048 line images, batch 128, width multiple 4, gain and offset, shuffled."""
    from ..core._images import GainOffset, ImageBatchCollator
    from ..datasets import line_images

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
    combined = hashlib.sha256()
    bar = Progress(steps, "batches") if progress else None
    wait_before = loader.statistics().consumer_wait_seconds
    started = time.perf_counter()
    async with loader.stream(start, start + steps) as batches:
        async for batch in batches:
            with batch:
                if digest:
                    combined.update(digest_batch(batch).encode())
            if bar is not None:
                bar.advance()
    seconds = time.perf_counter() - started
    wait = loader.statistics().consumer_wait_seconds - wait_before
    return DemoResult(steps, seconds, wait, combined.hexdigest() if digest else None)


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
    """Build the demo loader, run one pass on ``backend`` and return what it measured."""
    name, options = backend_arguments(backend)
    loader = make_demo_loader(seed=seed, workers=workers, prefetch=prefetch)
    return anyio.run(
        run_demo, loader, start_step, steps, digest, progress, backend=name, backend_options=options
    )


def add_parser(commands: Any) -> None:
    """Add ``demo`` to the subcommands."""
    backend = default_backend()
    parser = commands.add_parser(
        "demo",
        help="stream the line-image workload (W1) and print batches/s and its digest",
        description=(
            "Stream the synthetic line-image workload W1 (2,048 images, batch 128, width "
            "multiple 4, gain-and-offset augmentation, shuffled) twice: once as fast as the "
            "loader goes (batches/s and the share of time the consumer waited), then hashing "
            "every batch with SHA-256 (batches/s with the hash, and the digest of the "
            "steps). The digest is the same for any --workers, --prefetch, --backend or "
            "--start-step that covers the same steps. The defaults are the fastest W1 "
            f"setting of the README: --workers {WORKERS} --prefetch {PREFETCH} --backend "
            "uvloop (asyncio where uvloop is not installed)."
        ),
    )
    parser.add_argument(
        "--workers",
        type=non_negative,
        default=WORKERS,
        metavar="N",
        help=f"CPU threads; 0 builds on the event loop (default {WORKERS})",
    )
    parser.add_argument(
        "--prefetch",
        type=positive,
        default=PREFETCH,
        metavar="N",
        help=f"ring slots (default {PREFETCH})",
    )
    parser.add_argument(
        "--steps", type=positive, default=500, metavar="N", help="batches (default 500)"
    )
    parser.add_argument(
        "--start-step", type=non_negative, default=0, metavar="G", help="first global step"
    )
    parser.add_argument(
        "--seed", type=non_negative, default=0, metavar="S", help="run seed (default 0)"
    )
    parser.add_argument(
        "--backend", choices=BACKENDS, default=backend, help=f"event loop (default {backend})"
    )
    parser.add_argument(
        "--no-digest",
        action="store_true",
        help="skip the second, hashing pass (loader speed only)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> list[str]:
    """Run both passes and return the report's lines."""
    options = {
        "workers": args.workers,
        "prefetch": args.prefetch,
        "steps": args.steps,
        "start_step": args.start_step,
        "seed": args.seed,
        "backend": args.backend,
        "progress": True,
    }
    plain = demo_main(digest=False, **options)
    last = args.start_step + args.steps - 1
    lines = [
        f"steps {args.start_step}..{last}  workers {args.workers}  prefetch {args.prefetch}  "
        f"backend {args.backend}",
        f"loader alone   {plain.batches_per_second:,.0f} batches/s  "
        f"(consumer waited {plain.wait_share:.1%} of the pass)",
    ]
    if not args.no_digest:
        hashed = demo_main(digest=True, **options)
        lines += [
            f"with hashing   {hashed.batches_per_second:,.0f} batches/s  "
            "(SHA-256 of every batch on the consumer's thread)",
            f"digest         {hashed.digest}",
        ]
    return lines
