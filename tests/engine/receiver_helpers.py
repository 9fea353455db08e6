"""Datasets and collators for the tests of steps built without the event loop.

They live at module level in a module without pytest so that worker processes can import
them (a spawned worker unpickles them by name).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

BATCH = 4
"""Samples per step of the marking tests (``SequentialSampler(n, BATCH)``)."""


class Arrivals:
    """The steps whose batches reached this process's builders' hands, with a wait."""

    def __init__(self) -> None:
        self._steps: set[int] = set()
        self._changed = threading.Condition()

    def reset(self) -> None:
        with self._changed:
            self._steps.clear()

    def add(self, step: int) -> None:
        with self._changed:
            self._steps.add(step)
            self._changed.notify_all()

    def wait_for(self, step: int, timeout: float) -> bool:
        """Block this thread (the event loop's, in the tests) until ``step`` has arrived."""
        with self._changed:
            return self._changed.wait_for(lambda: step in self._steps, timeout)


ARRIVALS = Arrivals()


class Marked:
    """A batch that says it arrived when it is unpickled (in the parent's collector thread).

    Built in a build thread, it arrives when the collator returns it.
    """

    def __init__(self, step: int, values: npt.NDArray[np.int64]) -> None:
        self.step, self.values = step, values

    def __reduce__(self) -> tuple[Any, ...]:
        return arrived, (self.step, self.values)


def arrived(step: int, values: npt.NDArray[np.int64]) -> Marked:
    """Unpickles a ``Marked`` batch, recording its step."""
    ARRIVALS.add(step)
    return Marked(step, values)


def mark(samples: Sequence[int]) -> Marked:
    """Collates the integers of a ``SequentialSampler(n, BATCH)`` step over ``range(n)``."""
    step = samples[0] // BATCH
    batch = Marked(step, np.asarray(samples, dtype=np.int64))
    ARRIVALS.add(step)  # in a build thread: built; in a worker process: not seen by the parent
    return batch


class FailsAt:
    """A sync dataset of ``n`` float rows whose read of index ``bad`` raises OSError."""

    def __init__(self, n: int, bad: int) -> None:
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> npt.NDArray[np.float32]:
        if index == self.bad:
            raise OSError(f"injected failure reading index {index}")
        return np.full(3, index, dtype=np.float32)
