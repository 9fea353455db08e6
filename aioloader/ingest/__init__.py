"""Ingestion: URLs in (text, JSONL, Parquet), fetched, resized, written to tar shards.

``ingest`` (async) and ``ingest_sync`` are the Python API; ``aioloader ingest`` the command;
``ingest_on_ray`` splits the same ingestion over Ray tasks.
"""

from ._images import ImageOptions as ImageOptions
from ._images import ProcessedImage as ProcessedImage
from ._images import process_image as process_image
from ._inputs import InputRecord as InputRecord
from ._inputs import count_inputs as count_inputs
from ._inputs import read_inputs as read_inputs
from ._pipeline import ingest as ingest
from ._pipeline import ingest_sync as ingest_sync
from ._ray import ingest_on_ray as ingest_on_ray
from ._ray import merge_parts as merge_parts
from ._ray import part_name as part_name
from ._summary import IngestSummary as IngestSummary

__all__ = (
    "ImageOptions",
    "IngestSummary",
    "InputRecord",
    "ProcessedImage",
    "count_inputs",
    "ingest",
    "ingest_on_ray",
    "ingest_sync",
    "merge_parts",
    "part_name",
    "process_image",
    "read_inputs",
)
