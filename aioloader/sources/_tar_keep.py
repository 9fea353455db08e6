"""What indexing remote shards read, kept for the cache within the cache's bound.

A shard indexed on the fly behind a ``KnownFutureCache`` is streamed whole, and the first
epoch would read its samples again: they are worth keeping. ``KeepBudget`` bounds what is
kept. A shard is kept only if its size fits in the room left (the cache's free memory, less
what the shards kept so far hold); a kept shard is cut into its samples as soon as it is
indexed (its chunks dropped), and its samples are offered to the cache as soon as every
shard before it is indexed (their sample numbers are known then). Once the cache refuses a
sample, nothing more is kept. So indexing holds at most the cache's bound, plus the shards
in flight: one per indexing thread, whatever the number of shards.

Offers are made while ``TarShards`` is being built, before the cache is bound to it, so
they go to the memory tier only (the disk tier fills as batches are read).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from ._tar_index import TarSampleEntry
from .cache import KnownFutureCache

__all__ = ("KeepBudget", "KeptShard", "sample_bytes")


@dataclass(frozen=True)
class KeptShard:
    """A kept shard's sample bytes (None: not read whole) and the bytes they count."""

    pieces: tuple[bytes | None, ...]
    size: int


def sample_bytes(
    samples: Sequence[TarSampleEntry], chunks: dict[int, bytes]
) -> tuple[bytes | None, ...]:
    """Each sample's bytes (its ``span``) cut from ``chunks``, ``{start: bytes}`` of a shard.

    None for a sample with no bytes, or one not wholly inside contiguous chunks.

    >>> entry = TarSampleEntry("a", (("txt", 3, 4),))
    >>> sample_bytes([entry], {0: b"abcde", 5: b"fgh"})
    (b'defg',)
    """
    starts = sorted(chunks)
    pieces: list[bytes | None] = []
    for entry in samples:
        start, end = entry.span
        first = bisect.bisect_right(starts, start) - 1
        last = bisect.bisect_right(starts, end - 1) - 1
        if start == end or first < 0:
            pieces.append(None)
            continue
        if any(starts[k] + len(chunks[starts[k]]) != starts[k + 1] for k in range(first, last)):
            pieces.append(None)  # a gap between the chunks: not read
            continue
        piece = b"".join(chunks[s][max(0, start - s) : end - s] for s in starts[first : last + 1])
        pieces.append(piece if len(piece) == end - start else None)
    return tuple(pieces)


class KeepBudget:
    """The room indexing may fill with kept shards: the cache's free memory (thread-safe).

    Indexing threads ``reserve`` a shard's size before keeping it and ``release`` what
    cutting it into samples gave back; ``offer`` hands a kept shard to the cache, where
    what the cache took keeps counting and the rest is given back. A cache that already
    holds samples gets none (they would be another source's, or mixed with them).
    """

    def __init__(self, cache: KnownFutureCache) -> None:
        self.cache = cache
        stats = cache.statistics()
        free = cache.max_bytes - stats.current_bytes - stats.readahead_bytes
        self._room = free if stats.entries == 0 else 0
        self._held = 0
        self._open = True
        self._offered: list[int] = []
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        """Bytes reserved by kept shards plus those the cache took from them."""
        return self._held

    def reserve(self, size: int) -> bool:
        """Count ``size`` bytes of a shard to keep; False (nothing counted) if no room."""
        with self._lock:
            if not self._open or self._held + size > self._room:
                return False
            self._held += size
            return True

    def release(self, size: int) -> None:
        """Give back ``size`` reserved bytes (a shard that is not kept after all)."""
        with self._lock:
            self._held -= size

    def offer(self, first: int, kept: KeptShard) -> None:
        """Offer ``kept``'s samples, numbered from ``first``, to the cache (in shard order).

        Its reservation becomes the bytes the cache took. The first sample the cache
        refuses ends keeping: later shards are not kept, and their offers are dropped.
        """
        taken = 0
        for position, piece in enumerate(kept.pieces):
            if not self._open:
                break
            if piece is None:
                continue
            if self.cache.offer(first + position, piece):
                taken += len(piece)
                self._offered.append(first + position)
            else:
                with self._lock:
                    self._open = False
        with self._lock:
            self._held += taken - kept.size

    def withdraw(self) -> None:
        """Take back every sample offered (the source failed to build: they name nothing)."""
        with self._lock:
            self._open = False
        memory = self.cache.memory
        for unit in self._offered:
            if unit in memory:
                memory.take(unit, evicted=False)
        self._offered.clear()
