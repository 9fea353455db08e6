"""The known-future cache: a planner, two tiers (memory and disk) and an eviction policy.

- ``_planner``: the plan's next steps as numpy arrays, a bounded horizon at a time;
- ``_plans``: one plan per stream the cache serves, on one clock;
- ``_turns``: a sample on its way, and turns of work that yield to the event loop;
- ``_policy``: eviction by next use (Belady) or recency, fair shares of the room between
  streams where no plan knows the next use, and the read-ahead budget;
- ``_tiers`` and ``_disk``: the memory tier and the disk tier (atomic, checked files, in a
  folder it marks as its own);
- ``_room``: what room a read-ahead run may take, and how much of a run to read;
- ``_ranges``: byte ranges and their coalescing;
- ``_cache``: ``KnownFutureCache``, which reads through all of them.

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
