"""The async engine: the prefetch ring, the task group that fills it, the sync facade."""

from ._loader import DataLoader as DataLoader
from ._loader import LoaderStatistics as LoaderStatistics
from ._ring import PrefetchRing as PrefetchRing
from ._ring import RingStatistics as RingStatistics
from ._stream import BatchStream as BatchStream

__all__ = ("BatchStream", "DataLoader", "LoaderStatistics", "PrefetchRing", "RingStatistics")
