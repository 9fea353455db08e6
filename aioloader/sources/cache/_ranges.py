"""Coalescing byte ranges: few large ranged reads instead of one per sample (pure planning).

Two ranges of one object merge when the gap between them is at most ``gap`` bytes and the
merged range stays within ``max_bytes``: a request costs about as much as reading ``gap``
more bytes, so reading the gap is cheaper than a second request. When a batch's samples
cover a shard densely the merged range is the whole shard region, read with one GET.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...core import at_least

__all__ = ("ByteRange", "check_coalescing", "coalesce")

ByteRange = tuple[str, int, int]
"""``(key, start, end)``: bytes ``[start, end)`` of object ``key``."""


def check_coalescing(gap: Any, max_bytes: Any) -> tuple[int, int]:
    """``(coalesce_gap, max_request_bytes)`` checked: ints, gap >= 0, max_bytes >= 1."""
    return at_least("coalesce_gap", gap, 0), at_least("max_request_bytes", max_bytes, 1)


def coalesce(ranges: Iterable[ByteRange], gap: int, max_bytes: int) -> list[ByteRange]:
    """Merge ranges of the same object closer than ``gap`` bytes, up to ``max_bytes`` each.

    Overlapping and repeated ranges merge too. The result is ordered by object (in order of
    first appearance) then by start, so the plan does not depend on the order of a set.

    >>> coalesce([("a", 0, 10), ("b", 0, 5), ("a", 12, 20), ("a", 100, 110)], 4, 1000)
    [('a', 0, 20), ('a', 100, 110), ('b', 0, 5)]
    """
    by_key: dict[str, list[tuple[int, int]]] = {}
    for key, start, end in ranges:
        by_key.setdefault(key, []).append((start, end))
    merged: list[ByteRange] = []
    for key, spans in by_key.items():
        spans.sort()
        begin, stop = spans[0]
        for start, end in spans[1:]:
            if start - stop <= gap and max(stop, end) - begin <= max_bytes:
                stop = max(stop, end)
            else:
                merged.append((key, begin, stop))
                begin, stop = start, end
        merged.append((key, begin, stop))
    return merged
