"""The reads a plan will make, a bounded horizon at a time, as numpy arrays.

The batch at global step ``g`` is ``sampler.indices(seed, g // S, g % S)``, so the whole
future of a run is known once the sampler, the seed and the start step are. A
``HorizonPlanner`` keeps ``windows`` windows of ``window_steps`` steps known from the first
step not yet read. A window is three arrays (the step of each slot, its dataset index, and
each step's first index for matching a batch to its step); the horizon's next uses come
from one ``lexsort`` of the windows held. Nothing is kept per sample of the dataset, so
memory is O(horizon x batch size) whatever the dataset's size.

``compute_window`` is pure (it only calls the sampler) and runs in a worker thread;
``install`` adds its result on the event loop, which costs a sort of the horizon.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...core._check import u64

__all__ = ("NEVER", "HorizonPlanner", "Window", "check_sampler")

NEVER = 1 << 62
"""Next use of a sample that the known horizon does not read again."""

Int64Array = npt.NDArray[np.int64]


def check_sampler(sampler: Any) -> Any:
    """``sampler`` if it has ``steps_per_epoch >= 1`` and ``indices``, else a clear error."""
    if not callable(getattr(sampler, "indices", None)) or not hasattr(sampler, "steps_per_epoch"):
        raise TypeError(
            "sampler must have steps_per_epoch and indices(seed, epoch, step) "
            f"but got {type(sampler).__name__}"
        )
    if sampler.steps_per_epoch < 1:
        raise ValueError(f"sampler has steps_per_epoch = {sampler.steps_per_epoch}")
    return sampler


@dataclass(frozen=True)
class Window:
    """Steps ``[first, first + len(offsets) - 1)`` of the plan.

    Attributes:
        first: The window's first global step.
        index: Dataset indices of every slot, step after step.
        offsets: Step ``first + k`` holds ``index[offsets[k]:offsets[k + 1]]``.
    """

    first: int
    index: Int64Array
    offsets: Int64Array

    @property
    def stop(self) -> int:
        """The step after the window's last."""
        return self.first + len(self.offsets) - 1

    def steps(self) -> Int64Array:
        """``0 .. steps - 1``: the window's steps, relative to ``first``."""
        return np.arange(len(self.offsets) - 1, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays."""
        return int(self.index.nbytes + self.offsets.nbytes)


class HorizonPlanner:
    """A bounded, moving horizon of the plan: which step reads what, and when next.

    Args:
        sampler: The loader's sampler.
        seed: The loader's seed.
        start_step: The first global step to be read.
        window_steps: Steps per window (the unit of planning work).
        windows: Windows kept known ahead of the first step not yet read.
        slack: A step this far behind the latest one read is taken as never coming.
    """

    def __init__(
        self,
        sampler: Any,
        seed: int,
        start_step: int,
        *,
        window_steps: int,
        windows: int,
        slack: int,
    ) -> None:
        self._sampler = check_sampler(sampler)
        self._seed = u64("seed", seed)
        self._steps_per_epoch = int(sampler.steps_per_epoch)
        self.start = self.cursor = u64("start_step", start_step)
        self.window_steps = window_steps
        self.windows = windows
        self._slack = slack
        self._held: list[Window] = []
        self._consumed: set[int] = set()
        self._latest = -1
        self._base = self.cursor
        self._sorted_index: Int64Array = np.empty(0, np.int64)
        self._sorted_step: Int64Array = np.empty(0, np.int64)
        self._firsts: Int64Array = np.empty(0, np.int64)
        self._first_steps: Int64Array = np.empty(0, np.int64)

    # -- building ---------------------------------------------------------------------

    @property
    def planned_until(self) -> int:
        """The first step past the horizon held."""
        return self._held[-1].stop if self._held else self.cursor

    def wanted_window(self) -> int | None:
        """The first step of the next window to compute, or None while the horizon is full."""
        if self.planned_until - self.cursor >= self.windows * self.window_steps:
            return None
        return self.planned_until

    def compute_window(self, first: int) -> Window:
        """Steps ``[first, first + window_steps)`` (pure: safe in a worker thread)."""
        parts = []
        for step in range(first, first + self.window_steps):
            epoch, in_epoch = divmod(step, self._steps_per_epoch)
            parts.append(np.asarray(self._sampler.indices(self._seed, epoch, in_epoch), np.int64))
        offsets = np.zeros(len(parts) + 1, np.int64)
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        return Window(first, np.concatenate(parts), offsets)

    def install(self, window: Window) -> list[int]:
        """Add ``window`` if it is the next one; returns its distinct dataset indices."""
        if window.first != self.planned_until:
            return []  # a stale result (the horizon moved or was rebuilt meanwhile)
        self._held.append(window)
        self._rebuild()
        return [int(u) for u in np.unique(window.index)]

    def fill(self) -> None:
        """Compute and install windows until the horizon is full (blocking)."""
        while (first := self.wanted_window()) is not None:
            self.install(self.compute_window(first))

    def _rebuild(self) -> None:
        while self._held and self._held[0].stop <= self.cursor:
            self._held.pop(0)
        if not self._held:
            empty = np.empty(0, np.int64)
            self._sorted_index = self._sorted_step = self._firsts = self._first_steps = empty
            return
        self._base = self._held[0].first
        index = np.concatenate([w.index for w in self._held])
        step = np.concatenate(
            [w.first + np.repeat(w.steps(), np.diff(w.offsets)) for w in self._held]
        )
        order = np.lexsort((step, index))
        self._sorted_index = index[order]
        self._sorted_step = step[order]
        self._firsts = np.concatenate([w.index[w.offsets[:-1]] for w in self._held])
        self._first_steps = np.arange(self._base, self.planned_until, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held (the planner's memory, less small constants)."""
        held = sum(w.nbytes for w in self._held)
        derived = (self._sorted_index, self._sorted_step, self._firsts, self._first_steps)
        return held + sum(int(a.nbytes) for a in derived)

    # -- queries ----------------------------------------------------------------------

    def step_indices(self, step: int) -> Int64Array:
        """The dataset indices of global step ``step`` (computed if not held)."""
        for window in self._held:
            if window.first <= step < window.stop:
                k = step - window.first
                return window.index[window.offsets[k] : window.offsets[k + 1]]
        epoch, in_epoch = divmod(step, self._steps_per_epoch)
        return np.asarray(self._sampler.indices(self._seed, epoch, in_epoch), np.int64)

    def next_use(self, unit: int) -> int:
        """The next unread step that reads sample ``unit``, or ``NEVER`` within the horizon."""
        low = int(np.searchsorted(self._sorted_index, unit, "left"))
        high = int(np.searchsorted(self._sorted_index, unit, "right"))
        for position in range(low, high):
            step = int(self._sorted_step[position])
            if step >= self.cursor and step not in self._consumed:
                return step
        return NEVER

    def horizon_uses(self) -> tuple[Int64Array, Int64Array]:
        """``(units, first step)`` of every distinct sample read from the cursor on."""
        keep = self._sorted_step >= self.cursor
        units, steps = self._sorted_index[keep], self._sorted_step[keep]
        if not len(units):
            return units, steps
        first = np.ones(len(units), bool)
        first[1:] = units[1:] != units[:-1]
        return units[first], steps[first]

    def match(self, indices: Sequence[int]) -> int | None:
        """The earliest unread step whose batch is ``indices``, or None."""
        if not len(indices) or not len(self._firsts):
            return None
        wanted = np.asarray(indices, np.int64)
        for position in np.flatnonzero(self._firsts == wanted[0]):
            step = int(self._first_steps[position])
            if step < self.cursor or step in self._consumed:
                continue
            if np.array_equal(self.step_indices(step), wanted):
                return step
        return None

    def consume(self, step: int) -> None:
        """Step ``step`` is being read: its uses are spent and the horizon moves on."""
        self._consumed.add(step)
        self._latest = max(self._latest, step)
        while self.cursor in self._consumed or self.cursor < self._latest - self._slack:
            self._consumed.discard(self.cursor)
            self.cursor += 1
        if self._held and self._held[0].stop <= self.cursor:
            self._rebuild()
