"""``aioloader digest``: a fingerprint of the batches of a range of steps of a config."""

from __future__ import annotations

import argparse
import hashlib
from typing import Any

import anyio

from ..core import digest_batch, release_batch
from ._arguments import CommandError, add_loader_settings, add_option, non_negative, positive
from ._config import CONFIG_HELP, add_config_argument, load_factory


def add_parser(commands: Any) -> None:
    """Add ``digest`` to the subcommands."""
    parser = commands.add_parser(
        "digest",
        help="fingerprint the batches of steps START..STOP-1 of a config",
        description=(
            "Print a SHA-256 over every array of every batch of global steps [START, STOP). "
            "Two machines, worker counts or ports agree on a config if and only if they "
            "print the same digest. " + CONFIG_HELP
        ),
    )
    add_config_argument(parser)
    add_option(parser, "--start", non_negative, "START", "first global step", default=0)
    add_option(parser, "--stop", positive, "STOP", "one past the last step", default=32)
    add_loader_settings(parser, workers=0, prefetch=8)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> list[str]:
    """The digest line."""
    if args.stop <= args.start:
        raise CommandError(f"--stop must be > --start ({args.start}) but got {args.stop}")
    loader = load_factory(args.config)(workers=args.workers, prefetch=args.prefetch)

    async def fingerprint() -> str:
        combined = hashlib.sha256()
        async with loader.stream(args.start, args.stop) as batches:
            async for batch in batches:
                combined.update(digest_batch(batch).encode())
                release_batch(batch)
        return combined.hexdigest()

    return [f"{anyio.run(fingerprint)}  steps {args.start}..{args.stop - 1}"]
