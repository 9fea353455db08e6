"""The ``aioloader`` command: ``demo``, ``digest``."""

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
    return parser


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
        print(f"steps {args.start_step}..{last - 1}  workers {args.workers}  prefetch {args.prefetch}")
        print(f"batches/s     {result.batches_per_second:,.0f}")
        print(f"consumer wait {result.wait_share:.1%} of the run")
        if not args.no_digest:
            print(f"digest        {result.digest}")
        return 0
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
