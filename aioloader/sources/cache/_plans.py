"""The plans of the streams one cache serves, each kept apart, ranked on one clock.

A training stream and an evaluation stream over the same source each tell the cache their
plan. ``Plans`` keeps one ``HorizonPlanner`` per stream, keyed by the stream: by default
its sampler object and seed, so a stream that starts again from the same sampler (the
next epoch, a resume) replaces its own plan, and another sampler's plan stands beside it.
A plan whose stream reached its stop step is removed; ``KnownFutureCache.unplan`` removes
one at once.

Each plan's steps are placed on the cache's clock: ``time = offset + step``. A plan that
finds no other registered has offset 0, so one stream's times are its steps. A plan that
joins others starts at the clock's next tick (``offset = now + 1 - start_step``): the
cache cannot know how the streams will take turns, so it takes each stream's next step
to be as near as any other's. A sample's next use is its soonest over every plan
(Belady's policy over the union), and a batch is matched to the plan that reads it first.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field

import anyio

from ._planner import NEVER, HorizonPlanner

__all__ = ("PlannedStream", "Plans")


@dataclass(eq=False)
class PlannedStream:
    """One stream's plan and where its steps lie on the cache's clock.

    Attributes:
        key: The stream (its sampler and seed unless the caller named it).
        planner: The stream's horizon of the plan.
        offset: ``time = offset + step``.
        extending: Set when the extension of this plan under way ends (None: none is).
    """

    key: Hashable
    planner: HorizonPlanner
    offset: int
    extending: anyio.Event | None = field(default=None, repr=False)

    def time(self, step: int) -> int:
        """Step ``step`` of this stream on the cache's clock."""
        return self.offset + step

    @property
    def finished(self) -> bool:
        """Whether the stream reached its stop: every step of it is read or being read."""
        stop = self.planner.stop
        return stop is not None and self.planner.cursor >= stop


class Plans:
    """The registered plans, one per stream, in the order they were registered."""

    __slots__ = ("_streams",)

    def __init__(self) -> None:
        self._streams: dict[Hashable, PlannedStream] = {}

    def __len__(self) -> int:
        return len(self._streams)

    def __iter__(self) -> Iterator[PlannedStream]:
        return iter(list(self._streams.values()))

    def add(self, key: Hashable, planner: HorizonPlanner, now: int) -> PlannedStream:
        """Register ``planner`` as stream ``key``'s plan (replacing its former one).

        ``now`` is the clock's latest time read; the plan starts at the next tick, or at
        its own start step when no other stream is registered.
        """
        self._streams.pop(key, None)
        offset = now + 1 - planner.start if self._streams else 0
        stream = self._streams[key] = PlannedStream(key, planner, offset)
        return stream

    def remove(self, stream: PlannedStream) -> bool:
        """Unregister ``stream`` (False if it was already gone or replaced)."""
        if not self.holds(stream):
            return False
        del self._streams[stream.key]
        return True

    def get(self, key: Hashable) -> PlannedStream | None:
        """Stream ``key``'s plan, or None."""
        return self._streams.get(key)

    def holds(self, stream: PlannedStream) -> bool:
        """Whether ``stream`` is still registered (not removed nor replaced)."""
        return self._streams.get(stream.key) is stream

    def next_use(self, unit: int) -> int:
        """The soonest time any plan reads ``unit`` again, or ``NEVER``."""
        soonest = NEVER
        for stream in self._streams.values():
            step = stream.planner.next_use(unit)
            if step != NEVER:
                soonest = min(soonest, stream.time(step))
        return soonest

    def match(self, indices: Sequence[int]) -> tuple[PlannedStream, int] | None:
        """``(stream, step)``: the unread step of any plan whose batch is ``indices`` and
        comes first on the clock, or None."""
        best: tuple[PlannedStream, int] | None = None
        for stream in self._streams.values():
            step = stream.planner.match(indices)
            if step is not None and (best is None or stream.time(step) < best[0].time(best[1])):
                best = (stream, step)
        return best

    def units(self, but: PlannedStream | None = None) -> list[int]:
        """The distinct samples every plan (but ``but``) reads within its horizon."""
        seen: dict[int, None] = {}
        for stream in self._streams.values():
            if stream is not but:
                seen.update(dict.fromkeys(stream.planner.known_units()))
        return list(seen)

    @property
    def nbytes(self) -> int:
        """Bytes of every planner's arrays."""
        return sum(stream.planner.nbytes for stream in self._streams.values())
