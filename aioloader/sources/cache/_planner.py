"""The reads a plan will make, a bounded horizon at a time, as numpy arrays.

The batch at global step ``g`` is ``sampler.indices(seed, g // S, g % S)``, so the whole
future of a run is known once the sampler, the seed and the start step are. A
``HorizonPlanner`` keeps ``windows`` windows of ``window_steps`` steps known from the first
step not yet read. A window is two arrays (every slot's dataset index, and where each step
starts); the horizon's next uses come from one ``lexsort`` of the windows held, and a batch
is matched to its step by its first index. Nothing is kept per sample of the dataset, so
memory is O(horizon x batch size) whatever the dataset's size.

``extend`` is pure (it calls the sampler and sorts the horizon) and runs in a worker
thread; ``install`` swaps its result in on the event loop, which costs nothing.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...core import check_sampler, u64

__all__ = ("NEVER", "Horizon", "HorizonPlanner", "Window", "merge")

NEVER = 1 << 62
"""Next use of a sample that the known horizon does not read again."""

Int64Array = npt.NDArray[np.int64]


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


@dataclass(frozen=True)
class Horizon:
    """Windows held and what the queries need of them, built off the event loop.

    Attributes:
        windows: The windows, in step order.
        parent: The horizon this one extends (install checks it is still current).
        index_list: Every slot's dataset index, sorted (then by step).
        step_list: The step of each entry of ``index_list``.
        firsts: Each step's first dataset index, step after step.
        added: The distinct dataset indices of the newest window.
    """

    windows: tuple[Window, ...]
    parent: Horizon | None
    index_list: list[int]
    step_list: list[int]
    firsts: Int64Array
    added: list[int]

    @property
    def first(self) -> int:
        """The first step held."""
        return self.windows[0].first if self.windows else 0

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays and lists (8 bytes an item, plus the lists' pointers)."""
        lists = 2 * 16 * len(self.index_list)
        return sum(w.nbytes for w in self.windows) + int(self.firsts.nbytes) + lists


def merge(parent: Horizon | None, windows: tuple[Window, ...]) -> Horizon:
    """The ``Horizon`` of ``windows`` (pure: runs in a worker thread)."""
    index = np.concatenate([w.index for w in windows])
    step = np.concatenate([w.first + np.repeat(w.steps(), np.diff(w.offsets)) for w in windows])
    order = np.lexsort((step, index))
    firsts = np.concatenate([w.index[w.offsets[:-1]] for w in windows])
    added = np.unique(windows[-1].index).tolist()
    return Horizon(windows, parent, index[order].tolist(), step[order].tolist(), firsts, added)


class HorizonPlanner:
    """A bounded, moving horizon of the plan: which step reads what, and when next.

    Args:
        sampler: The loader's sampler.
        seed: The loader's seed.
        start_step: The first global step to be read.
        window_steps: Steps per window (the unit of planning work).
        windows: Windows kept known ahead of the first step not yet read.
        slack: A step this far behind the latest one read is taken as never coming.
        stop_step: The step the stream stops before (None: it runs on); nothing past it
            is planned, so nothing past it is read ahead.
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
        stop_step: int | None = None,
    ) -> None:
        self._sampler = check_sampler(sampler)
        self._seed = u64("seed", seed)
        self._steps_per_epoch = int(sampler.steps_per_epoch)
        self.start = self.cursor = u64("start_step", start_step)
        self.stop = None if stop_step is None else max(self.start, u64("stop_step", stop_step))
        self.window_steps = window_steps
        self.windows = windows
        self._slack = slack
        self._consumed: set[int] = set()
        self._latest = -1
        self._horizon: Horizon | None = None

    # -- building ---------------------------------------------------------------------

    @property
    def planned_until(self) -> int:
        """The first step past the horizon held."""
        horizon = self._horizon
        return horizon.windows[-1].stop if horizon is not None else self.cursor

    def wanted_window(self) -> int | None:
        """The first step of the next window to compute, or None while the horizon is full."""
        if self.planned_until - self.cursor >= self.windows * self.window_steps:
            return None
        if self.stop is not None and self.planned_until >= self.stop:
            return None  # the stream ends there
        return self.planned_until

    def compute_window(self, first: int) -> Window:
        """Steps ``[first, first + window_steps)``, cut at the stop (pure: safe in a thread)."""
        last = first + self.window_steps
        if self.stop is not None:
            last = max(first + 1, min(last, self.stop))
        parts = []
        for step in range(first, last):
            epoch, in_epoch = divmod(step, self._steps_per_epoch)
            parts.append(np.asarray(self._sampler.indices(self._seed, epoch, in_epoch), np.int64))
        offsets = np.zeros(len(parts) + 1, np.int64)
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        return Window(first, np.concatenate(parts), offsets)

    def extend(self, first: int) -> Horizon:
        """The horizon with the window at ``first`` added and passed windows dropped.

        Pure given the horizon it starts from: the cache runs it in a worker thread, then
        ``install`` swaps it in on the event loop.
        """
        parent = self._horizon
        cursor = self.cursor
        kept = () if parent is None else tuple(w for w in parent.windows if w.stop > cursor)
        return merge(parent, (*kept, self.compute_window(first)))

    def install(self, horizon: Horizon) -> list[int]:
        """Use ``horizon`` if it extends the current one; returns its new dataset indices."""
        if horizon.parent is not self._horizon:
            return []  # a stale result (the plan was replaced meanwhile)
        self._horizon = horizon
        return horizon.added

    def fill(self) -> None:
        """Compute and install windows until the horizon is full (blocking)."""
        while (first := self.wanted_window()) is not None:
            self.install(self.extend(first))

    @property
    def nbytes(self) -> int:
        """Bytes of the horizon's arrays and lists (the planner's memory, roughly)."""
        return 0 if self._horizon is None else self._horizon.nbytes

    # -- queries ----------------------------------------------------------------------

    def step_indices(self, step: int) -> Int64Array:
        """The dataset indices of global step ``step`` (computed if not held)."""
        if self._horizon is not None:
            for window in self._horizon.windows:
                if window.first <= step < window.stop:
                    k = step - window.first
                    return window.index[window.offsets[k] : window.offsets[k + 1]]
        epoch, in_epoch = divmod(step, self._steps_per_epoch)
        return np.asarray(self._sampler.indices(self._seed, epoch, in_epoch), np.int64)

    def next_use(self, unit: int) -> int:
        """The next unread step that reads sample ``unit``, or ``NEVER`` within the horizon."""
        horizon = self._horizon
        if horizon is None:
            return NEVER
        index, steps = horizon.index_list, horizon.step_list
        position = bisect.bisect_left(index, unit)
        while position < len(index) and index[position] == unit:
            step = steps[position]
            if step >= self.cursor and step not in self._consumed:
                return step
            position += 1
        return NEVER

    def known_units(self) -> list[int]:
        """The distinct dataset indices of the horizon held, in order."""
        horizon = self._horizon
        return [] if horizon is None else list(dict.fromkeys(horizon.index_list))

    def match(self, indices: Sequence[int]) -> int | None:
        """The earliest unread step whose batch is ``indices``, or None."""
        horizon = self._horizon
        if not len(indices) or horizon is None:
            return None
        wanted = np.asarray(indices, np.int64)
        for position in np.flatnonzero(horizon.firsts == wanted[0]).tolist():
            step = horizon.first + int(position)
            if step < self.cursor or step in self._consumed:
                continue
            if np.array_equal(self.step_indices(step), wanted):
                return step
        return None

    @property
    def steps_per_epoch(self) -> int:
        """Steps of one epoch of the sampler."""
        return self._steps_per_epoch

    def epoch_end(self, step: int) -> int:
        """The first step of the epoch after the one ``step`` belongs to."""
        return (step // self._steps_per_epoch + 1) * self._steps_per_epoch

    def is_read(self, step: int) -> bool:
        """Whether step ``step`` is being read or was read (its uses are spent)."""
        return step < self.cursor or step in self._consumed

    def consume(self, step: int) -> None:
        """Step ``step`` is being read: its uses are spent and the horizon moves on."""
        self._consumed.add(step)
        self._latest = max(self._latest, step)
        while self.cursor in self._consumed or self.cursor < self._latest - self._slack:
            self._consumed.discard(self.cursor)
            self.cursor += 1
