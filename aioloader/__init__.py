"""aioloader: a deterministic, resumable, asyncio-native data loader for ML training.

The batch at global step ``g`` is a pure function of ``(seed, g)``, the dataset, the
sampler's arguments, the transform and the collator.
"""

from ._errors import AioloaderError as AioloaderError
from ._errors import BufferReleasedError as BufferReleasedError
from ._errors import CollateError as CollateError
from ._errors import LoaderClosedError as LoaderClosedError
from ._errors import MalformedShardError as MalformedShardError
from ._errors import ObjectNotFoundError as ObjectNotFoundError
from ._errors import SourceError as SourceError
from .core import BatchAugmentation as BatchAugmentation
from .core import BatchPlan as BatchPlan
from .core import BatchRng as BatchRng
from .core import BlockShuffledSampler as BlockShuffledSampler
from .core import BucketedSampler as BucketedSampler
from .core import BufferPool as BufferPool
from .core import DistributedSampler as DistributedSampler
from .core import GainOffset as GainOffset
from .core import ImageBatch as ImageBatch
from .core import ImageBatchCollator as ImageBatchCollator
from .core import ImageSample as ImageSample
from .core import MixingSampler as MixingSampler
from .core import PackCollator as PackCollator
from .core import PackedBatch as PackedBatch
from .core import PackedSampler as PackedSampler
from .core import PackedSequences as PackedSequences
from .core import Packing as Packing
from .core import PadCollator as PadCollator
from .core import PaddedBatch as PaddedBatch
from .core import PaddingReport as PaddingReport
from .core import PoolStatistics as PoolStatistics
from .core import RankSlice as RankSlice
from .core import Sampler as Sampler
from .core import SampleRng as SampleRng
from .core import SequentialSampler as SequentialSampler
from .core import ShuffledSampler as ShuffledSampler
from .core import TreeBatch as TreeBatch
from .core import TreeCollator as TreeCollator
from .core import default_collate as default_collate
from .core import derive as derive
from .core import derive_slots as derive_slots
from .core import digest_batch as digest_batch
from .core import digest_stream as digest_stream
from .core import first_fit_decreasing as first_fit_decreasing
from .core import gray8_to_planar as gray8_to_planar
from .core import keyed_permutation as keyed_permutation
from .core import keyed_permutation_array as keyed_permutation_array
from .core import mix as mix
from .core import mix_array as mix_array
from .core import pack_lengths as pack_lengths
from .core import pack_sequences as pack_sequences
from .core import pad_sequences as pad_sequences
from .core import padding_report as padding_report
from .core import plan_batch as plan_batch
from .core import rgb8_to_planar as rgb8_to_planar
from .core import split_global_step as split_global_step
from .engine import BatchStream as BatchStream
from .engine import DataLoader as DataLoader
from .engine import LoaderStatistics as LoaderStatistics
from .sources import CacheStatistics as CacheStatistics
from .sources import KnownFutureCache as KnownFutureCache
from .sources import LocalFiles as LocalFiles
from .sources import ObjectStore as ObjectStore
from .sources import RetryPolicy as RetryPolicy
from .sources import Stream as Stream
from .sources import TarShards as TarShards
from .sources import decode_bytes as decode_bytes
from .sources import decode_npy as decode_npy

__version__ = "0.1.0"

__all__ = (
    "CacheStatistics",
    "KnownFutureCache",
    "LocalFiles",
    "ObjectStore",
    "RetryPolicy",
    "Stream",
    "TarShards",
    "decode_bytes",
    "decode_npy",
    "AioloaderError",
    "BatchAugmentation",
    "BatchPlan",
    "BatchRng",
    "BatchStream",
    "BlockShuffledSampler",
    "BucketedSampler",
    "BufferPool",
    "BufferReleasedError",
    "CollateError",
    "DataLoader",
    "DistributedSampler",
    "GainOffset",
    "ImageBatch",
    "ImageBatchCollator",
    "ImageSample",
    "LoaderClosedError",
    "LoaderStatistics",
    "MalformedShardError",
    "MixingSampler",
    "ObjectNotFoundError",
    "PackCollator",
    "PackedBatch",
    "PackedSampler",
    "PackedSequences",
    "Packing",
    "PadCollator",
    "PaddedBatch",
    "PaddingReport",
    "PoolStatistics",
    "RankSlice",
    "SampleRng",
    "Sampler",
    "SequentialSampler",
    "ShuffledSampler",
    "SourceError",
    "TreeBatch",
    "TreeCollator",
    "default_collate",
    "derive",
    "derive_slots",
    "digest_batch",
    "digest_stream",
    "first_fit_decreasing",
    "gray8_to_planar",
    "keyed_permutation",
    "keyed_permutation_array",
    "mix",
    "mix_array",
    "pack_lengths",
    "pack_sequences",
    "pad_sequences",
    "padding_report",
    "plan_batch",
    "rgb8_to_planar",
    "split_global_step",
)
