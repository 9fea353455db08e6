"""The plans of the streams one cache serves, each kept apart, ranked on one clock.

A training stream and an evaluation stream over the same source each tell the cache their
plan. ``Plans`` keeps one ``HorizonPlanner`` per stream, keyed by the stream: by default
its sampler object and seed, so a stream that starts again from the same sampler (the
next epoch, a resume) replaces its own plan, and another sampler's plan stands beside it.
A plan whose stream reached its stop step is removed; ``KnownFutureCache.unplan`` removes
one at once.

A stream that reached its stop is expected back (the next epoch, the next evaluation
pass): it still shares the cache (``sharing``), so the entries it used keep its share of
the room, until ``unplan`` forgets it or a stream never seen before starts (then the
streams that ended are taken to be gone, as a loop over fresh samplers leaves them).
The next pass of each stream with a stop (its first horizon, from its stop on, live or
ended) counts as known too, placed on the stream's own clock right after its stop: the
entries an evaluation pass reads first are ranked by its next pass, not as never needed
again, and a training stream alone keeps for its next epoch what that epoch reads first.

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
        after: The first horizon of the stream's next pass (from its stop on), known for
            ranking only (nothing is read ahead for it); None for a stream without a stop.
        extending: Set when the extension of this plan under way ends (None: none is).
    """

    key: Hashable
    planner: HorizonPlanner
    offset: int
    after: HorizonPlanner | None = None
    extending: anyio.Event | None = field(default=None, repr=False)

    def time(self, step: int) -> int:
        """Step ``step`` of this stream on the cache's clock."""
        return self.offset + step

    @property
    def finished(self) -> bool:
        """Whether the stream reached its stop: every step of it is read or being read."""
        stop = self.planner.stop
        return stop is not None and self.planner.cursor >= stop


SEEN = 1024
"""Streams remembered as seen before (the oldest are forgotten first)."""


class Plans:
    """The registered plans, one per stream, in the order they were registered.

    Attributes:
        sharing: The streams that share the cache: every registered one, then those that
            ended and are expected back, in the order they came.
    """

    __slots__ = ("_ended", "_passes", "_seen", "_streams", "sharing")

    def __init__(self) -> None:
        self._streams: dict[Hashable, PlannedStream] = {}
        self._ended: dict[Hashable, PlannedStream] = {}  # reached their stop: expected back
        self._seen: dict[Hashable, None] = {}  # every stream seen, the latest last
        self.sharing: tuple[Hashable, ...] = ()
        self._passes: list[tuple[PlannedStream, HorizonPlanner]] = []

    def __len__(self) -> int:
        return len(self._streams)

    def __iter__(self) -> Iterator[PlannedStream]:
        return iter(list(self._streams.values()))

    def add(
        self,
        key: Hashable,
        planner: HorizonPlanner,
        now: int,
        after: HorizonPlanner | None = None,
    ) -> PlannedStream:
        """Register ``planner`` as stream ``key``'s plan (replacing its former one), with
        ``after``, its next pass's first horizon.

        ``now`` is the clock's latest time read; the plan starts at the next tick, or at
        its own start step when no other stream is registered.
        """
        if key not in self._seen:  # a new stream: the ended ones are taken to be gone
            self._ended.clear()
        self._seen.pop(key, None)
        self._seen[key] = None
        if len(self._seen) > SEEN:
            del self._seen[next(iter(self._seen))]
        self._ended.pop(key, None)
        self._streams.pop(key, None)
        offset = now + 1 - planner.start if self._streams else 0
        stream = self._streams[key] = PlannedStream(key, planner, offset, after)
        self._shared()
        return stream

    def remove(self, stream: PlannedStream) -> bool:
        """Unregister ``stream`` (False if it was already gone or replaced)."""
        if not self.holds(stream):
            return False
        del self._streams[stream.key]
        self._shared()
        return True

    def end(self, stream: PlannedStream) -> None:
        """``stream`` reached its stop: unregistered, and expected back."""
        if self.remove(stream):
            self._ended[stream.key] = stream
            self._shared()

    def forget(self, key: Hashable) -> bool:
        """Unregister stream ``key`` and expect it no more; False if it had no plan and
        was not expected back."""
        ended = self._ended.pop(key, None) is not None
        stream = self._streams.get(key)
        self._shared()
        return (stream is not None and self.remove(stream)) or ended

    def _shared(self) -> None:
        self.sharing = (*self._streams, *self._ended)
        # every next pass counts: the entries kept for it are chosen while this pass reads
        streams = [*self._streams.values(), *self._ended.values()]
        self._passes = [(s, s.after) for s in streams if s.after is not None]

    def get(self, key: Hashable) -> PlannedStream | None:
        """Stream ``key``'s plan, or None."""
        return self._streams.get(key)

    def holds(self, stream: PlannedStream) -> bool:
        """Whether ``stream`` is still registered (not removed nor replaced)."""
        return self._streams.get(stream.key) is stream

    def next_use(self, unit: int, *, passes: bool = True) -> int:
        """The soonest time any plan reads ``unit`` again, or ``NEVER``.

        Each stream's next pass counts too (its first horizon, from its stop on: a stream
        that ended is expected back), unless ``passes`` is False (what to read ahead: only
        the plans' own steps).
        """
        soonest = NEVER
        for stream in self._streams.values():
            step = stream.planner.next_use(unit)
            if step != NEVER:
                soonest = min(soonest, stream.time(step))
        for stream, after in self._passes if passes else ():
            step = after.next_use(unit)
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
        for _, after in self._passes:
            seen.update(dict.fromkeys(after.known_units()))
        return list(seen)

    @property
    def nbytes(self) -> int:
        """Bytes of every planner's arrays (next passes' included)."""
        streams = [*self._streams.values(), *self._ended.values()]
        return sum(s.planner.nbytes + (0 if s.after is None else s.after.nbytes) for s in streams)
