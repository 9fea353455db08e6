"""The async engine: the prefetch ring, the task group that fills it, the sync facade."""

from ._autotune import AutoTune as AutoTune
from ._global_random import GlobalRandomWarning as GlobalRandomWarning
from ._loader import DataLoader as DataLoader
from ._loader import LoaderStatistics as LoaderStatistics
from ._ring import PrefetchRing as PrefetchRing
from ._ring import RingStatistics as RingStatistics
from ._stream import BatchStream as BatchStream
from ._threads import BuildThreads as BuildThreads  # ingestion runs its CPU work on these

__all__ = (
    "AutoTune",
    "BatchStream",
    "DataLoader",
    "GlobalRandomWarning",
    "LoaderStatistics",
    "PrefetchRing",
    "RingStatistics",
)
