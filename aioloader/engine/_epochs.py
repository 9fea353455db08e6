"""Where a loop over a loader starts: ``set_epoch``, the torch form's epoch per loop, resume.

The cursor (the next global step) is the loader's one piece of state. A ``for`` (or ``async
for``) over the loader serves one epoch; this decides which, when the loop takes its first
batch:

- after ``set_epoch(e)``: epoch ``e`` from its first step (or from the cursor, when a
  ``load_state_dict`` put it inside epoch ``e``: that resume is what the caller asked for);
- in the torch form, a loop that follows one left early (``break``) starts the next epoch,
  as torch's ``DataLoader`` does; a resume mid-epoch still serves the rest of that epoch;
- in the sampler form, the rest of the cursor's epoch (the loader warns when a ``for``
  resumes an epoch the previous one left).

A torch ``DistributedSampler`` given to the torch form counts as ``set_epoch``: when its
``epoch`` changed since the last loop (``sampler.set_epoch(e)``), the loop serves epoch ``e``.
"""

from __future__ import annotations

import threading
from typing import Any

from ..core import u64
from ._config import ResumeCursor


class Epochs:
    """The epoch each loop over one loader serves (thread-safe).

    Args:
        new_per_loop: the torch form: a loop after one left early starts the next epoch.
        follows: a torch ``DistributedSampler`` whose ``epoch`` acts as ``set_epoch``.
        resumed: the cursor was placed on purpose (``start_step``): the first loop serves
            the rest of its epoch.
    """

    __slots__ = ("_follows", "_lock", "_new_per_loop", "_requested", "_resumed", "_seen")

    def __init__(self, *, new_per_loop: bool, follows: Any = None, resumed: bool = True) -> None:
        self._new_per_loop = new_per_loop
        self._follows = follows
        self._seen = None if follows is None else int(follows.epoch)
        self._requested: int | None = None
        self._resumed = resumed
        self._lock = threading.Lock()

    @property
    def new_per_loop(self) -> bool:
        """Whether every loop starts an epoch of its own (the torch form)."""
        return self._new_per_loop

    def set_epoch(self, epoch: Any) -> None:
        """The next loop serves epoch ``epoch``."""
        value = u64("epoch", epoch)
        with self._lock:
            self._requested = value

    def resumed(self) -> None:
        """The cursor was loaded from a checkpoint: the next loop continues from it."""
        with self._lock:
            self._resumed = True

    def _request(self) -> int | None:
        requested, self._requested = self._requested, None
        if self._follows is not None:
            epoch = int(self._follows.epoch)
            if epoch != self._seen:
                self._seen = epoch
                requested = epoch
        return requested

    def begin_loop(self, cursor: ResumeCursor, steps: int) -> int | None:
        """Move ``cursor`` to where the next loop starts; return where it stops in the
        torch form (None in the sampler form, whose loop ends with the cursor's epoch)."""
        with self._lock:
            requested = self._request()
            resumed, self._resumed = self._resumed, False
            step = cursor.step
            if steps == 0:
                return step if self._new_per_loop else None
            if requested is not None:
                if not (resumed and step // steps == requested):
                    step = requested * steps
            elif self._new_per_loop and step % steps and not resumed:
                step = (step // steps + 1) * steps
            cursor.step = step
            return (step // steps + 1) * steps if self._new_per_loop else None


__all__ = ("Epochs",)
