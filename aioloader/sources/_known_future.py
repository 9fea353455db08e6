"""The reads a plan will make: which step a batch is, and when each sample is next read.

The batch at global step ``g`` is ``sampler.indices(seed, g // S, g % S)``, so the whole
future of a run is known once the sampler, the seed and the start step are. ``KnownFuture``
keeps ``horizon`` steps of it ahead of the first step not yet read: for each sample, the
steps that read it (``next_use``), and for each batch its step (``match``, by its indices).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from ..core._check import u64
from ..core._samplers import check_sampler

__all__ = ("NEVER", "KnownFuture")

NEVER = 1 << 62
"""Next use of a sample that the known future does not read again."""


class KnownFuture:
    """``horizon`` steps of a plan ahead of the first step not yet read.

    Args:
        sampler: The loader's sampler.
        seed: The loader's seed.
        start_step: The first global step to be read.
        horizon: Steps kept known ahead of the first unread one.
        slack: A step this far behind the latest one read is taken as never coming.
        on_change: Called with a sample whose next use changed.
    """

    def __init__(
        self,
        sampler: Any,
        seed: int,
        start_step: int,
        horizon: int,
        slack: int,
        on_change: Callable[[int], None],
    ) -> None:
        self._sampler = check_sampler(sampler)
        self._seed = u64("seed", seed)
        self._steps_per_epoch = int(sampler.steps_per_epoch)
        self.cursor = self.planned_until = u64("start_step", start_step)
        self._horizon = horizon
        self._slack = slack
        self._on_change = on_change
        self._consumed: set[int] = set()
        self._uses: dict[int, deque[int]] = {}
        self._by_hash: dict[int, list[int]] = {}
        self._memo: dict[int, list[int]] = {}
        self._extend()

    def step_indices(self, step: int) -> list[int]:
        """The dataset indices of global step ``step``."""
        memo = self._memo.get(step)
        if memo is None:
            epoch, in_epoch = divmod(step, self._steps_per_epoch)
            memo = [int(i) for i in self._sampler.indices(self._seed, epoch, in_epoch).tolist()]
            if len(self._memo) > 4 * self._slack:
                self._memo.clear()
            self._memo[step] = memo
        return memo

    def next_use(self, unit: int) -> int:
        """The next step that reads sample ``unit``, or ``NEVER`` within the horizon."""
        uses = self._uses.get(unit)
        return uses[0] if uses else NEVER

    def match(self, indices: Sequence[int]) -> int | None:
        """The earliest unread step whose batch is ``indices``, or None."""
        steps = self._by_hash.get(hash(tuple(indices)))
        if not steps:
            return None
        wanted = [int(i) for i in indices]
        for step in steps:
            if step not in self._consumed and self.step_indices(step) == wanted:
                return step
        return None

    def consume(self, step: int) -> None:
        """Step ``step`` is being read: its uses are spent, the horizon moves on."""
        self._retire(step)
        self._consumed.add(step)
        for stale in range(self.cursor, step - self._slack):
            if stale not in self._consumed:  # never asked for: it will not come any more
                self._retire(stale)
                self._consumed.add(stale)
        while self.cursor in self._consumed:
            self._consumed.discard(self.cursor)
            self.cursor += 1
        self._extend()

    def _extend(self) -> None:
        target = self.cursor + self._horizon
        while self.planned_until < target:
            step = self.planned_until
            indices = self.step_indices(step)
            for unit in dict.fromkeys(indices):
                uses = self._uses.get(unit)
                if uses is None:
                    self._uses[unit] = deque((step,))
                    self._on_change(unit)
                else:
                    uses.append(step)
            self._by_hash.setdefault(hash(tuple(indices)), []).append(step)
            self.planned_until += 1
            self._memo.pop(step, None)

    def _retire(self, step: int) -> None:
        indices = self.step_indices(step)
        for unit in dict.fromkeys(indices):
            uses = self._uses.get(unit)
            if uses is not None and step in uses:
                uses.remove(step)
                if not uses:
                    del self._uses[unit]
                self._on_change(unit)
        key = hash(tuple(indices))
        steps = self._by_hash.get(key)
        if steps is not None and step in steps:
            steps.remove(step)
            if not steps:
                del self._by_hash[key]
        self._memo.pop(step, None)
