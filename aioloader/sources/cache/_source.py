"""What the cache needs from the source it serves (``TarShards`` implements it)."""

from __future__ import annotations

from typing import Protocol

from ._ranges import ByteRange

__all__ = ("RangeSource",)


class RangeSource(Protocol):
    """Byte spans of samples in versioned objects, read with ranged requests."""

    def __len__(self) -> int: ...

    def span_of(self, index: int) -> ByteRange:
        """``(key, start, end)``: where sample ``index``'s bytes lie."""
        ...

    def indices_within(self, key: str, start: int, end: int) -> range:
        """The samples whose spans lie inside bytes ``[start, end)`` of ``key``."""
        ...

    def versions(self) -> tuple[tuple[str, str], ...]:
        """``(key, version tag)`` of every object (its ETag, or a local file's mtime)."""
        ...

    async def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``key``, all of them (one request)."""
        ...
