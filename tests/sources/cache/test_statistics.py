"""aioloader.sources.cache._statistics: the live tally and the snapshot it feeds."""

from __future__ import annotations

import dataclasses

from aioloader.sources.cache._statistics import CacheStatistics, Tally


def test_the_tally_counts_under_the_names_of_the_snapshot() -> None:
    tally = Tally()
    tally.hits, tally.bytes_fetched, tally.planned_batches, tally.lead_total = 3, 4096, 2, 1.5
    counts = tally.counts()
    assert set(counts) <= {field.name for field in dataclasses.fields(CacheStatistics)}
    assert counts == {
        "hits": 3,
        "misses": 0,
        "memory_hits": 0,
        "disk_hits": 0,
        "requests": 0,
        "bytes_fetched": 4096,
        "bytes_used": 0,
        "bytes_between": 0,
        "bytes_dropped": 0,
        "bytes_waiting": 0,
        "prefetched": 0,
        "prefetch_hits": 0,
        "planned_batches": 2,
        "disk_errors": 0,
        "bytes_unused": 0,
    }
