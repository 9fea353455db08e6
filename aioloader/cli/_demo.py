"""``aioloader demo``: stream the line-image workload and print what was measured."""

from __future__ import annotations

import argparse
import hashlib
import time
from dataclasses import dataclass
from typing import Any

import anyio

from .._progress import Progress
from ..core import ShuffledSampler, digest_batch
from ..engine import DataLoader
from ._arguments import (
    BACKENDS,
    add_loader_settings,
    add_option,
    backend_arguments,
    default_backend,
    non_negative,
    options_named,
    positive,
)
from ._kernels import ready_kernels

WORKERS = 0
PREFETCH = 8
"""The fastest W1 setting measured in the README's performance table (with uvloop)."""
WARM_UP = 16
"""Batches consumed before the clock starts, as ``aioloader bench`` does (fills the ring)."""


@dataclass(frozen=True)
class StartUp:
    """The time before the steady state: the first batch, then the compiled kernels."""

    first_batch_seconds: float
    kernels: str
    kernels_seconds: float
    kernels_note: str


@dataclass(frozen=True)
class DemoResult:
    """What one timed pass over the demo's steps measured (after its warm-up)."""

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
    from ..core import GainOffset, ImageBatchCollator
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


async def start_up(loader: DataLoader[Any, Any], start: int) -> StartUp:
    """Time the first batch of a fresh loader, then wait for the compiled kernels.

    The first batch never waits for the kernels (numpy builds it when they are not loaded
    yet); the steady state is measured once they are, so that it is the rate a training
    run sees after its first seconds.
    """
    began = time.perf_counter()
    async with loader.stream(start, start + 1) as batches:
        async for batch in batches:
            batch.release()
    first = time.perf_counter() - began
    kernels, note = await anyio.to_thread.run_sync(ready_kernels)
    return StartUp(first, kernels, time.perf_counter() - began, note)


async def run_demo(
    loader: DataLoader[Any, Any],
    start: int,
    steps: int,
    digest: bool,
    progress: bool,
    warm_up: int = 0,
) -> DemoResult:
    """Consume ``warm_up`` untimed batches from ``start``, then ``steps`` timed ones.

    With ``digest`` every timed batch is hashed.
    """
    combined = hashlib.sha256()
    bar = Progress(warm_up + steps, "batches") if progress else None
    wait_before, started, seen = 0.0, time.perf_counter(), 0
    async with loader.stream(start, start + warm_up + steps) as batches:
        async for batch in batches:
            if seen == warm_up:
                wait_before = loader.statistics().consumer_wait_seconds
                started = time.perf_counter()
            with batch:
                if digest and seen >= warm_up:
                    combined.update(digest_batch(batch).encode())
            seen += 1
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
) -> tuple[StartUp, DemoResult]:
    """Build the demo loader, time its start-up, then one pass on ``backend``.

    Without ``digest`` the pass is the steady state: ``WARM_UP`` untimed batches from
    ``start_step``, then ``steps`` timed ones. With ``digest`` it hashes exactly the steps
    ``start_step .. start_step + steps - 1`` (no warm-up: the digest names those steps).
    """
    name, options = backend_arguments(backend)
    loader = make_demo_loader(seed=seed, workers=workers, prefetch=prefetch)
    warm_up = 0 if digest else WARM_UP

    async def both() -> tuple[StartUp, DemoResult]:
        began = await start_up(loader, start_step)
        return began, await run_demo(loader, start_step, steps, digest, progress, warm_up)

    return anyio.run(both, backend=name, backend_options=options)


def wait_explained(workers: int, share: float) -> str:
    """The consumer's wait share in words: what it means at this worker count."""
    if workers == 0:
        return (
            f"the consumer waited {share:.0%} of that time; at --workers 0 the event loop "
            "builds each batch while the consumer awaits it, so this is the build time, "
            "not starvation"
        )
    return (
        f"the consumer waited {share:.0%} of that time: a training step would sit idle "
        f"that long while the {workers} worker thread{'s' if workers > 1 else ''} built "
        "batches (near 0% means the loader keeps ahead)"
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
    add_loader_settings(parser, workers=WORKERS, prefetch=PREFETCH)
    add_option(parser, "--steps", positive, "N", "batches (default 500)", default=500)
    add_option(parser, "--start-step", non_negative, "G", "first global step", default=0)
    add_option(parser, "--seed", non_negative, "S", "run seed (default 0)", default=0)
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
    options = options_named(args, "workers", "prefetch", "steps", "start_step", "seed", "backend")
    began, plain = demo_main(digest=False, progress=True, **options)
    last = args.start_step + args.steps - 1
    lines = [
        f"steps {args.start_step}..{last}  workers {args.workers}  prefetch {args.prefetch}  "
        f"backend {args.backend}",
        f"start-up       first batch after {began.first_batch_seconds:.2f} s; kernels "
        f"{began.kernels} ready after {began.kernels_seconds:.2f} s ({began.kernels_note})",
        f"steady state   {plain.batches_per_second:,.0f} batches/s over {plain.steps} "
        f"batches, after {WARM_UP} warm-up batches",
        f"waiting        {wait_explained(args.workers, plain.wait_share)}",
    ]
    if not args.no_digest:
        _, hashed = demo_main(digest=True, progress=True, **options)
        lines += [
            f"with hashing   {hashed.batches_per_second:,.0f} batches/s  "
            "(SHA-256 of every batch on the consumer's thread)",
            f"digest         {hashed.digest}",
        ]
    return lines
