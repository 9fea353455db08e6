"""Data sources: each implements the dataset protocol and knows nothing of the engine.

The sources that need obstore or read files (``LocalFiles``, ``ObjectStore``, ``TarShards``,
``ImageFolder`` and their helpers) are imported on first use, so ``import aioloader`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._decode import decode_bytes as decode_bytes
from ._decode import decode_npy as decode_npy
from ._retry import RetryPolicy as RetryPolicy
from ._stream import Stream as Stream
from ._views import ConcatDataset as ConcatDataset
from ._views import Subset as Subset
from .cache import CacheStatistics as CacheStatistics
from .cache import KnownFutureCache as KnownFutureCache

if TYPE_CHECKING:
    from ._http import HttpFetcher as HttpFetcher
    from ._http_result import FAILURE_REASONS as FAILURE_REASONS
    from ._http_result import FetchResult as FetchResult
    from ._http_result import HttpStatistics as HttpStatistics
    from ._http_source import HttpFetchError as HttpFetchError
    from ._http_source import HttpNotFoundError as HttpNotFoundError
    from ._http_source import HttpSource as HttpSource
    from ._image_folder import IMAGE_EXTENSIONS as IMAGE_EXTENSIONS
    from ._image_folder import ImageFolder as ImageFolder
    from ._image_folder import LabeledImage as LabeledImage
    from ._local import LocalFiles as LocalFiles
    from ._object_store import ObjectReader as ObjectReader
    from ._object_store import ObjectStore as ObjectStore
    from ._object_store import ObjectStoreStatistics as ObjectStoreStatistics
    from ._tar import TarSample as TarSample
    from ._tar import TarShards as TarShards
    from ._tar import decode_tar_sample as decode_tar_sample
    from ._tar_index import ShardIndex as ShardIndex
    from ._tar_index import TarSampleEntry as TarSampleEntry
    from ._tar_index import index_json_name as index_json_name
    from ._tar_index import load_index as load_index
    from ._tar_index import save_index as save_index

_LAZY = {
    "FAILURE_REASONS": "._http_result",
    "FetchResult": "._http_result",
    "HttpFetchError": "._http_source",
    "HttpFetcher": "._http",
    "HttpNotFoundError": "._http_source",
    "HttpSource": "._http_source",
    "HttpStatistics": "._http_result",
    "IMAGE_EXTENSIONS": "._image_folder",
    "ImageFolder": "._image_folder",
    "LabeledImage": "._image_folder",
    "LocalFiles": "._local",
    "ObjectReader": "._object_store",
    "ObjectStore": "._object_store",
    "ObjectStoreStatistics": "._object_store",
    "TarSample": "._tar",
    "TarShards": "._tar",
    "decode_tar_sample": "._tar",
    # For the other units of the package (not in ``__all__``): the shard writer writes the
    # index ``TarShards`` reads; ingestion runs its threads' callbacks on the loop.
    "ShardIndex": "._tar_index",
    "TarSampleEntry": "._tar_index",
    "index_json_name": "._tar_index",
    "load_index": "._tar_index",
    "save_index": "._tar_index",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = (
    "CacheStatistics",
    "ConcatDataset",
    "FAILURE_REASONS",
    "FetchResult",
    "HttpFetchError",
    "HttpFetcher",
    "HttpNotFoundError",
    "HttpSource",
    "HttpStatistics",
    "IMAGE_EXTENSIONS",
    "ImageFolder",
    "KnownFutureCache",
    "LabeledImage",
    "LocalFiles",
    "ObjectReader",
    "ObjectStore",
    "ObjectStoreStatistics",
    "RetryPolicy",
    "Stream",
    "Subset",
    "TarSample",
    "TarShards",
    "decode_bytes",
    "decode_npy",
    "decode_tar_sample",
)
