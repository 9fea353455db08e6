"""The ``aioloader`` command: ``demo``, ``digest``, ``tune``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

BACKENDS = ("asyncio", "uvloop", "trio")


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer but got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 but got {value}")
    return value


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 but got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="aioloader",
        description="A deterministic, resumable, asyncio-native data loader for ML training.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="stream the spec's line-image workload and print batches/s",
        description=(
            "Stream the spec's synthetic line-image workload (2,048 images, batch 128, width "
            "multiple 4, gain-and-offset augmentation, shuffled) and print batches/s, the "
            "share of time the consumer waited for data, and a digest of the stream. The "
            "digest of a range of steps is the same for any --workers, --prefetch or "
            "--start-step."
        ),
    )
    demo.add_argument("--workers", type=_non_negative, default=1, help="CPU threads (default 1)")
    demo.add_argument("--prefetch", type=_positive, default=8, help="ring slots (default 8)")
    demo.add_argument("--steps", type=_positive, default=500, help="batches (default 500)")
    demo.add_argument("--start-step", type=_non_negative, default=0, help="first global step")
    demo.add_argument("--seed", type=_non_negative, default=0, help="run seed (default 0)")
    demo.add_argument("--backend", choices=BACKENDS, default="asyncio", help="event loop")
    demo.add_argument(
        "--no-digest", action="store_true", help="do not hash batches (pure loader speed)"
    )
    digest = commands.add_parser(
        "digest",
        help="fingerprint the batches of steps START..STOP-1 of a config",
        description=(
            "Print a SHA-256 over every array of every batch of global steps [START, STOP). "
            "Two machines, worker counts or ports agree on a config iff they print the "
            "same digest."
        ),
    )
    digest.add_argument("config", nargs="?", help=".json or .py config (default: the demo)")
    digest.add_argument("--start", type=_non_negative, default=0, help="first global step")
    digest.add_argument("--stop", type=_positive, default=32, help="one past the last step")
    digest.add_argument("--workers", type=_non_negative, default=0)
    digest.add_argument("--prefetch", type=_positive, default=8)
    tune = commands.add_parser(
        "tune",
        help="measure load time per batch and recommend workers and prefetch",
        description=(
            "Measure the time to load one batch of a config, then apply the idealised model "
            "(a worker makes a batch every LOAD ms, the trainer takes one every STEP ms): "
            "recommend W = ceil(LOAD / STEP) workers and print the epoch time per W."
        ),
    )
    tune.add_argument("config", nargs="?", help=".json or .py config (default: the demo)")
    tune.add_argument("--step-ms", type=float, required=True, help="the trainer's step time")
    tune.add_argument("--load-ms", type=float, help="skip measuring: the load time per batch")
    tune.add_argument("--batches", type=_positive, default=64, help="batches to measure")
    return parser


def _run_digest(args: argparse.Namespace) -> int:
    import anyio

    from ._config import load_factory
    from .core._digest import digest_batch

    if args.stop <= args.start:
        raise SystemExit(
            f"aioloader digest: --stop must be > --start ({args.start}) but got {args.stop}"
        )
    loader = load_factory(args.config)(workers=args.workers, prefetch=args.prefetch)

    async def fingerprint() -> str:
        import hashlib

        combined = hashlib.sha256()
        async with loader.stream(args.start, args.stop) as batches:
            async for batch in batches:
                combined.update(digest_batch(batch).encode())
                release = getattr(batch, "release", None)
                if callable(release):
                    release()
        return combined.hexdigest()

    print(f"{anyio.run(fingerprint)}  steps {args.start}..{args.stop - 1}")
    return 0


def _run_tune(args: argparse.Namespace) -> int:
    import time

    from ._config import load_factory
    from ._tuning import epoch_time, recommend_workers

    if args.step_ms <= 0:
        raise SystemExit(f"aioloader tune: --step-ms must be > 0 but got {args.step_ms}")
    if args.load_ms is None:
        loader = load_factory(args.config)(workers=0, prefetch=1)
        started = time.perf_counter()
        for batch in loader.iter_sync(0, args.batches):
            release = getattr(batch, "release", None)
            if callable(release):
                release()
        load = (time.perf_counter() - started) / args.batches
        print(f"measured load time per batch: {load * 1e3:.2f} ms over {args.batches} batches")
    else:
        load = args.load_ms / 1e3
    step = args.step_ms / 1e3
    workers = recommend_workers(load, step)
    batches = 12
    print(f"recommended: workers={workers}, prefetch={max(2, 2 * workers)}")
    print(
        f"idealised epoch of {batches} batches (load {load * 1e3:.1f} ms, step {args.step_ms} ms):"
    )
    for count in range(workers + 2):
        estimate = epoch_time(load, step, batches, count)
        print(f"  workers={count}: {estimate.epoch_seconds * 1e3:.0f} ms")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``aioloader`` and ``python -m aioloader``."""
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from ._demo import demo_main

        result = demo_main(
            workers=args.workers,
            prefetch=args.prefetch,
            steps=args.steps,
            start_step=args.start_step,
            seed=args.seed,
            backend=args.backend,
            digest=not args.no_digest,
            progress=True,
        )
        last = args.start_step + args.steps
        print(
            f"steps {args.start_step}..{last - 1}  workers {args.workers}  prefetch {args.prefetch}"
        )
        print(f"batches/s     {result.batches_per_second:,.0f}")
        print(f"consumer wait {result.wait_share:.1%} of the run")
        if not args.no_digest:
            print(f"digest        {result.digest}")
        return 0
    if args.command == "digest":
        return _run_digest(args)
    if args.command == "tune":
        return _run_tune(args)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
