"""The known-future cache: a planner, two tiers (memory and disk) and an eviction policy.

- ``_planner`` and ``_plans``: the plan's next steps as numpy arrays, a bounded horizon at a
  time, one plan per stream on one clock; ``_planning`` installs, extends and forgets them;
- ``_held``: where each sample is (the tiers, read-ahead, reads on their way): the state
  the other parts share;
- ``_admission``: which used sample a tier keeps, and the disk work that follows;
- ``_readahead`` and ``_room``: what a step reads ahead, and what room a run may take;
- ``_fetching`` and ``_ranges``: samples merged into range requests, and their coalescing;
- ``_behind``: read-ahead fetched behind the steps, by the server the loader runs;
- ``_reading``: one batch's read through all of them;
- ``_policy``: eviction by next use (Belady) or recency, fair shares of the room between
  streams where no plan knows the next use, and the read-ahead budget;
- ``_tiers``, ``_disk`` and ``_disk_folder``: the memory tier and the disk tier (atomic,
  checked files, in a folder it marks as its own);
- ``_turns``: a sample on its way, and turns of work that yield to the event loop;
- ``_cache``: ``KnownFutureCache``, the face that puts them together.

See ``docs/object-storage.md`` for the cost model, the tiers and admission.
"""

from __future__ import annotations

from ._cache import KnownFutureCache as KnownFutureCache
from ._planner import NEVER as NEVER
from ._planner import HorizonPlanner as HorizonPlanner
from ._ranges import ByteRange as ByteRange
from ._ranges import check_coalescing as check_coalescing
from ._ranges import coalesce as coalesce
from ._source import RangeSource as RangeSource
from ._statistics import CacheStatistics as CacheStatistics

__all__ = (
    "NEVER",
    "ByteRange",
    "CacheStatistics",
    "HorizonPlanner",
    "KnownFutureCache",
    "RangeSource",
    "check_coalescing",
    "coalesce",
)
