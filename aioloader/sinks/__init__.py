"""Sinks: shard writers and their manifests, the mirror image of the sources."""

from .._errors import ResumeMismatchError as ResumeMismatchError
from .._errors import WriterConflictError as WriterConflictError
from ._destination import Destination as Destination
from ._destination import LocalDestination as LocalDestination
from ._destination import StoreDestination as StoreDestination
from ._destination import make_destination as make_destination
from ._manifest import FailureRecord as FailureRecord
from ._manifest import InputEnd as InputEnd
from ._manifest import Manifest as Manifest
from ._manifest import ShardRecord as ShardRecord
from ._read_back import open_shards as open_shards
from ._read_back import read_failures as read_failures
from ._read_back import read_manifest as read_manifest
from ._store_errors import short_reason as short_reason
from ._tar_writer import MANIFEST_NAME as MANIFEST_NAME
from ._tar_writer import TarShardWriter as TarShardWriter
from ._tar_writer import WriterStatistics as WriterStatistics

__all__ = (
    "MANIFEST_NAME",
    "Destination",
    "FailureRecord",
    "LocalDestination",
    "Manifest",
    "ResumeMismatchError",
    "ShardRecord",
    "StoreDestination",
    "TarShardWriter",
    "WriterConflictError",
    "WriterStatistics",
    "open_shards",
    "read_failures",
    "read_manifest",
    "short_reason",
)
