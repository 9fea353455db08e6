"""Interop with frameworks: rank resolution here; ``aioloader.interop.torch`` and
``aioloader.interop.jax`` when imported by name (each imports its framework).

The framework modules import their framework, so they are never imported from here.
"""

from ._ranks import RankInfo as RankInfo
from ._ranks import rank_slice as rank_slice
from ._ranks import resolve_rank as resolve_rank

__all__ = ("RankInfo", "rank_slice", "resolve_rank")
