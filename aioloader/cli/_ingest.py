"""``aioloader ingest``: URLs or records in, WebDataset shards out (see ``aioloader.ingest``).

The command streams its progress (one line per committed shard, then the summary) as it
goes, since a run may last hours; errors still end as one ``error: ...`` line.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(commands: Any) -> None:
    """Add ``ingest`` to the subcommands."""
    from ..ingest._command import add_parser as add_ingest_parser

    parser = add_ingest_parser(commands)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> list[str]:
    """Run the ingestion; its lines were printed while it ran."""
    from ..ingest._command import run as run_ingest

    run_ingest(args)
    return []
