"""The pure core: random numbers, permutation, samplers, batch plans, collation, buffers.

Synchronous, numpy only, no I/O and no threads of its own. ``__all__`` is the public API;
the other names imported here (argument checks, the tuner's rules, sampler helpers, the
kernel slot) are the core's face to the other units of the package.
"""

from ._autotune import Decision as Decision
from ._autotune import ExecutorRule as ExecutorRule
from ._autotune import Knobs as Knobs
from ._autotune import TunerState as TunerState
from ._autotune import Window as Window
from ._autotune import tune as tune
from ._block_sampler import BlockShuffledSampler as BlockShuffledSampler
from ._block_sampler import shard_pieces as shard_pieces
from ._check import as_int as as_int
from ._check import at_least as at_least
from ._check import at_least_or_none as at_least_or_none
from ._check import flag as flag
from ._check import instance_not_bool as instance_not_bool
from ._check import positive as positive
from ._check import positive_up_to as positive_up_to
from ._check import real as real
from ._check import u64 as u64
from ._compiled import install_kernels as install_kernels
from ._compiled import load_kernels as load_kernels
from ._digest import digest_batch as digest_batch
from ._digest import digest_stream as digest_stream
from ._identity import sampler_identity as sampler_identity
from ._identity import values_digest as values_digest
from ._image_chain import JpegCropResize as JpegCropResize
from ._image_chain import crop_resize as crop_resize
from ._image_ops import BatchAugmentation as BatchAugmentation
from ._image_ops import GainOffset as GainOffset
from ._image_ops import batch_normals as batch_normals
from ._image_ops import gray8_to_planar as gray8_to_planar
from ._image_ops import rgb8_to_planar as rgb8_to_planar
from ._images import ImageBatch as ImageBatch
from ._images import ImageBatchCollator as ImageBatchCollator
from ._images import ImageSample as ImageSample
from ._markers import callable_name as callable_name
from ._markers import takes_key as takes_key
from ._markers import takes_plan as takes_plan
from ._markers import takes_rng as takes_rng
from ._markers import wants_key as wants_key
from ._markers import wants_plan as wants_plan
from ._markers import wants_rng as wants_rng
from ._markers import warn_signature_read as warn_signature_read
from ._packed import PackCollator as PackCollator
from ._packed import PackedBatch as PackedBatch
from ._packed import PackedSampler as PackedSampler
from ._packing import PackedSequences as PackedSequences
from ._packing import Packing as Packing
from ._packing import PaddingReport as PaddingReport
from ._packing import first_fit_decreasing as first_fit_decreasing
from ._packing import pack_lengths as pack_lengths
from ._packing import pack_sequences as pack_sequences
from ._packing import padding_report as padding_report
from ._permutation import keyed_permutation as keyed_permutation
from ._permutation import keyed_permutation_array as keyed_permutation_array
from ._plan import BatchPlan as BatchPlan
from ._plan import plan_batch as plan_batch
from ._plan import split_global_step as split_global_step
from ._pool import BatchField as BatchField
from ._pool import BatchState as BatchState
from ._pool import BufferPool as BufferPool
from ._pool import PooledBatch as PooledBatch
from ._pool import PoolStatistics as PoolStatistics
from ._pool import StepBatch as StepBatch
from ._pool import release_batch as release_batch
from ._replacement import replacement_index as replacement_index
from ._rng import BatchRng as BatchRng
from ._rng import SampleRng as SampleRng
from ._rng import derive as derive
from ._rng import derive_slots as derive_slots
from ._rng import mix as mix
from ._rng import mix_array as mix_array
from ._rng import sample_rngs as sample_rngs
from ._samplers import BucketedSampler as BucketedSampler
from ._samplers import IndexArray as IndexArray
from ._samplers import MixingSampler as MixingSampler
from ._samplers import Sampler as Sampler
from ._samplers import SequentialSampler as SequentialSampler
from ._samplers import ShuffledSampler as ShuffledSampler
from ._samplers import batches_in as batches_in
from ._samplers import check_sampler as check_sampler
from ._sequences import PadCollator as PadCollator
from ._sequences import PaddedBatch as PaddedBatch
from ._sequences import pad_sequences as pad_sequences
from ._sharding import DistributedSampler as DistributedSampler
from ._sharding import RankSlice as RankSlice
from ._sharding import batch_sizes_of as batch_sizes_of
from ._streams import RngStream as RngStream
from ._tree import TreeBatch as TreeBatch
from ._tree import TreeCollator as TreeCollator
from ._tree import default_collate as default_collate
from ._weighted import WeightedRandomSampler as WeightedRandomSampler

__all__ = (
    "BatchAugmentation",
    "BatchField",
    "BatchPlan",
    "BatchRng",
    "BatchState",
    "BlockShuffledSampler",
    "BucketedSampler",
    "BufferPool",
    "DistributedSampler",
    "GainOffset",
    "ImageBatch",
    "ImageBatchCollator",
    "ImageSample",
    "JpegCropResize",
    "MixingSampler",
    "PackCollator",
    "PackedBatch",
    "PackedSampler",
    "PackedSequences",
    "Packing",
    "PadCollator",
    "PaddedBatch",
    "PaddingReport",
    "PoolStatistics",
    "PooledBatch",
    "RankSlice",
    "RngStream",
    "SampleRng",
    "Sampler",
    "SequentialSampler",
    "ShuffledSampler",
    "StepBatch",
    "TreeBatch",
    "TreeCollator",
    "WeightedRandomSampler",
    "batch_normals",
    "batch_sizes_of",
    "crop_resize",
    "default_collate",
    "derive",
    "derive_slots",
    "digest_batch",
    "digest_stream",
    "first_fit_decreasing",
    "gray8_to_planar",
    "keyed_permutation",
    "keyed_permutation_array",
    "load_kernels",
    "mix",
    "mix_array",
    "pack_lengths",
    "pack_sequences",
    "pad_sequences",
    "padding_report",
    "plan_batch",
    "rgb8_to_planar",
    "sampler_identity",
    "shard_pieces",
    "split_global_step",
    "takes_key",
    "takes_plan",
    "takes_rng",
    "values_digest",
    "wants_key",
    "wants_plan",
    "wants_rng",
)
