"""The pure core: random numbers, permutation, samplers, batch plans, collation, buffers.

Synchronous, numpy only, no I/O and no threads of its own.
"""

from ._digest import digest_batch as digest_batch
from ._digest import digest_stream as digest_stream
from ._permutation import keyed_permutation as keyed_permutation
from ._permutation import keyed_permutation_array as keyed_permutation_array
from ._plan import BatchPlan as BatchPlan
from ._plan import plan_batch as plan_batch
from ._plan import split_global_step as split_global_step
from ._rng import BatchRng as BatchRng
from ._rng import SampleRng as SampleRng
from ._rng import derive as derive
from ._rng import derive_slots as derive_slots
from ._rng import mix as mix
from ._rng import mix_array as mix_array
from ._samplers import BucketedSampler as BucketedSampler
from ._sharding import DistributedSampler as DistributedSampler
from ._sharding import RankSlice as RankSlice
from ._sharding import batch_sizes_of as batch_sizes_of
from ._samplers import MixingSampler as MixingSampler
from ._samplers import Sampler as Sampler
from ._samplers import SequentialSampler as SequentialSampler
from ._samplers import ShuffledSampler as ShuffledSampler

__all__ = (
    "BatchPlan",
    "BatchRng",
    "BucketedSampler",
    "DistributedSampler",
    "MixingSampler",
    "RankSlice",
    "SampleRng",
    "Sampler",
    "SequentialSampler",
    "ShuffledSampler",
    "batch_sizes_of",
    "derive",
    "derive_slots",
    "digest_batch",
    "digest_stream",
    "keyed_permutation",
    "keyed_permutation_array",
    "mix",
    "mix_array",
    "plan_batch",
    "split_global_step",
)
