"""W6L: W6 with shards of 64 MB in every format, towards the size WebDataset advises.

The same JPEGs, rows and checks as W6 (``w6_object_storage``), written as tars of 64 MB
(one sample more at most; the last shard holds what is left), LitData chunks and MDS shards
of 64 MB (64,000,000 bytes, LitData's "64MB"): 4 shards of each for 4,096 images. The
+20 ms path only, and the rows whose index is saved beforehand; its own table and targets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness import Case

from workloads import w6_object_storage as w6

NAME = "W6L"
OPT_IN = True  # minutes; LitData and Mosaic installed by hand
SHARD_BYTES = 64_000_000
PIECE = 256
"""Samples per piece in the rows over pieces: W6's shards of 256 (16 MB), so that a block of
four mixes as W6's does, and WebDataset's ``shuffle(1000)``."""
TITLE = (
    "W6 with shards of 64 MB in every format (4 for 4,096 JPEGs): tars, "
    "LitData chunks, MDS shards; +20 ms per request; cold epoch"
)
NOTES = [
    *w6.NOTES,
    "Shards: WebDataset `ShardWriter(maxsize=64 MB)` (a shard ends at the first sample "
    "past 64,000,000 bytes), LitData `optimize(chunk_bytes=64 MB)`, `MDSWriter(size_limit="
    "64 MB)`; the 'shards' column counts the row's own format. WebDataset batches within "
    "each worker, so shards of uneven sizes give it a partial batch a worker.",
]


def config(quick: bool) -> w6.W6Config:
    """W6L's settings (quick: 512 images in 4 shards of 8 MB)."""
    size = 8_000_000 if quick else SHARD_BYTES
    images = 512 if quick else 4096
    return w6.W6Config(
        images=images,
        direct=False,
        shard_bytes=size,
        on_the_fly=False,
        workload=NAME,
        piece=PIECE // 8 if quick else PIECE,
    )


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W6L's cases and notes."""
    return w6.build_config(config(quick), quick, log, stack)


def targets(cases: list[Case]) -> list[dict[str, Any]]:
    """W6's targets on W6L's rows."""
    return w6.targets(cases, NAME)
