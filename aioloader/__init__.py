"""aioloader: a deterministic, resumable, asyncio-native data loader for ML training.

The batch at global step ``g`` is a pure function of ``(seed, g)``, the dataset, the
sampler's arguments, the transform and the collator.
"""

from ._errors import AioloaderError as AioloaderError
from ._errors import BufferReleasedError as BufferReleasedError
from ._errors import LoaderClosedError as LoaderClosedError
from ._errors import MalformedShardError as MalformedShardError
from ._errors import ObjectNotFoundError as ObjectNotFoundError
from ._errors import SourceError as SourceError
from .core import BatchPlan as BatchPlan
from .core import BatchRng as BatchRng
from .core import BucketedSampler as BucketedSampler
from .core import DistributedSampler as DistributedSampler
from .core import RankSlice as RankSlice
from .core import MixingSampler as MixingSampler
from .core import Sampler as Sampler
from .core import SampleRng as SampleRng
from .core import SequentialSampler as SequentialSampler
from .core import ShuffledSampler as ShuffledSampler
from .core import derive as derive
from .core import derive_slots as derive_slots
from .core import keyed_permutation as keyed_permutation
from .core import keyed_permutation_array as keyed_permutation_array
from .core import mix as mix
from .core import mix_array as mix_array
from .core import plan_batch as plan_batch

__version__ = "0.1.0"

__all__ = (
    "AioloaderError",
    "BatchPlan",
    "BatchRng",
    "BucketedSampler",
    "DistributedSampler",
    "BufferReleasedError",
    "LoaderClosedError",
    "MalformedShardError",
    "MixingSampler",
    "ObjectNotFoundError",
    "RankSlice",
    "SampleRng",
    "Sampler",
    "SequentialSampler",
    "ShuffledSampler",
    "SourceError",
    "derive",
    "derive_slots",
    "keyed_permutation",
    "keyed_permutation_array",
    "mix",
    "mix_array",
    "plan_batch",
)
