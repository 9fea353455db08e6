"""Data sources: each implements the dataset protocol and knows nothing of the engine."""

from ._cache import CacheStatistics as CacheStatistics
from ._cache import KnownFutureCache as KnownFutureCache
from ._decode import decode_bytes as decode_bytes
from ._decode import decode_npy as decode_npy
from ._local import LocalFiles as LocalFiles
from ._object_store import ObjectReader as ObjectReader
from ._object_store import ObjectStore as ObjectStore
from ._object_store import ObjectStoreStatistics as ObjectStoreStatistics
from ._retry import RetryPolicy as RetryPolicy
from ._stream import Stream as Stream
from ._tar import TarSample as TarSample
from ._tar import TarShards as TarShards
from ._tar import decode_tar_sample as decode_tar_sample

__all__ = (
    "CacheStatistics",
    "KnownFutureCache",
    "LocalFiles",
    "ObjectReader",
    "ObjectStore",
    "ObjectStoreStatistics",
    "RetryPolicy",
    "Stream",
    "TarSample",
    "TarShards",
    "decode_bytes",
    "decode_npy",
    "decode_tar_sample",
)
