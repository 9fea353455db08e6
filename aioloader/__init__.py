"""aioloader: a deterministic, resumable, asyncio-native data loader for ML training.

The batch at global step ``g`` is a pure function of ``(seed, g)``, the dataset, the
sampler's arguments, the transform and the collator (docs/contract.md).

This module holds what loaders are built with: the loader, samplers, collators, batch
types, sources, the protocols they meet and the errors. The primitives underneath (random
numbers, permutations, batch plans, pixel and packing helpers, digests) live in
``aioloader.core``. Sources that need obstore (or start threads) are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import kernels as kernels  # fills the core's kernel slot: compiled kernels run
from ._errors import AioloaderError as AioloaderError
from ._errors import BufferReleasedError as BufferReleasedError
from ._errors import CollateError as CollateError
from ._errors import LoaderClosedError as LoaderClosedError
from ._errors import MalformedShardError as MalformedShardError
from ._errors import ObjectNotFoundError as ObjectNotFoundError
from ._errors import SourceError as SourceError
from ._errors import WorkerDiedError as WorkerDiedError
from ._protocols import BatchedDataset as BatchedDataset
from ._protocols import Collator as Collator
from ._protocols import Dataset as Dataset
from ._protocols import SyncDataset as SyncDataset
from .core import BatchAugmentation as BatchAugmentation
from .core import BatchRng as BatchRng
from .core import BlockShuffledSampler as BlockShuffledSampler
from .core import BucketedSampler as BucketedSampler
from .core import BufferPool as BufferPool
from .core import DistributedSampler as DistributedSampler
from .core import GainOffset as GainOffset
from .core import ImageBatch as ImageBatch
from .core import ImageBatchCollator as ImageBatchCollator
from .core import ImageSample as ImageSample
from .core import JpegCropResize as JpegCropResize
from .core import MixingSampler as MixingSampler
from .core import PackCollator as PackCollator
from .core import PackedBatch as PackedBatch
from .core import PackedSampler as PackedSampler
from .core import PadCollator as PadCollator
from .core import PaddedBatch as PaddedBatch
from .core import PoolStatistics as PoolStatistics
from .core import RankSlice as RankSlice
from .core import Sampler as Sampler
from .core import SampleRng as SampleRng
from .core import SequentialSampler as SequentialSampler
from .core import ShuffledSampler as ShuffledSampler
from .core import TreeBatch as TreeBatch
from .core import TreeCollator as TreeCollator
from .core import WeightedRandomSampler as WeightedRandomSampler
from .core import default_collate as default_collate
from .core import load_kernels as load_kernels
from .core import shard_pieces as shard_pieces
from .core import takes_key as takes_key
from .core import takes_plan as takes_plan
from .core import takes_rng as takes_rng
from .engine import AutoTune as AutoTune
from .engine import BatchStream as BatchStream
from .engine import DataLoader as DataLoader
from .engine import GlobalRandomWarning as GlobalRandomWarning
from .engine import LoaderStatistics as LoaderStatistics
from .sources import CacheStatistics as CacheStatistics
from .sources import ConcatDataset as ConcatDataset
from .sources import KnownFutureCache as KnownFutureCache
from .sources import RetryPolicy as RetryPolicy
from .sources import Stream as Stream
from .sources import Subset as Subset
from .sources import decode_bytes as decode_bytes
from .sources import decode_npy as decode_npy

if TYPE_CHECKING:
    from .sources import ImageFolder as ImageFolder
    from .sources import LocalFiles as LocalFiles
    from .sources import ObjectStore as ObjectStore
    from .sources import TarShards as TarShards

__version__ = "0.1.0"

_LAZY_SOURCES = frozenset({"ImageFolder", "LocalFiles", "ObjectStore", "TarShards"})


def __getattr__(name: str) -> Any:
    if name not in _LAZY_SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import sources

    value = getattr(sources, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = (
    "AioloaderError",
    "AutoTune",
    "BatchAugmentation",
    "BatchRng",
    "BatchStream",
    "BatchedDataset",
    "BlockShuffledSampler",
    "BucketedSampler",
    "BufferPool",
    "BufferReleasedError",
    "CacheStatistics",
    "CollateError",
    "Collator",
    "ConcatDataset",
    "DataLoader",
    "Dataset",
    "DistributedSampler",
    "GainOffset",
    "GlobalRandomWarning",
    "ImageBatch",
    "ImageBatchCollator",
    "ImageFolder",
    "ImageSample",
    "JpegCropResize",
    "KnownFutureCache",
    "LoaderClosedError",
    "LoaderStatistics",
    "LocalFiles",
    "MalformedShardError",
    "MixingSampler",
    "ObjectNotFoundError",
    "ObjectStore",
    "PackCollator",
    "PackedBatch",
    "PackedSampler",
    "PadCollator",
    "PaddedBatch",
    "PoolStatistics",
    "RankSlice",
    "RetryPolicy",
    "SampleRng",
    "Sampler",
    "SequentialSampler",
    "ShuffledSampler",
    "SourceError",
    "Stream",
    "Subset",
    "SyncDataset",
    "TarShards",
    "TreeBatch",
    "TreeCollator",
    "WeightedRandomSampler",
    "WorkerDiedError",
    "decode_bytes",
    "decode_npy",
    "default_collate",
    "load_kernels",
    "shard_pieces",
    "takes_key",
    "takes_plan",
    "takes_rng",
)
