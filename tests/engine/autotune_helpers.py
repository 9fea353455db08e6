"""Fake clocks and a transform for the executor tests of workers="auto".

They live at module level in a module without pytest so that worker processes can import
them (a spawned worker unpickles the transform by name). Only the test's own process holds
clocks (``CLOCKS``): in a worker process the transform builds without touching any.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from aioloader import takes_plan, takes_rng
from aioloader.core import BatchPlan, SampleRng
from tests.engine.helpers import jitter


class GilClocks:
    """A wall clock and a CPU clock that move only when the test (or a build) says so.

    While ``gil`` is set, the CPU clock stands still: builds on threads spend wall time but
    no CPU time, as threads that wait for the GIL do, and each build costs ``cost`` wall
    seconds a sample. Otherwise the CPU clock follows the wall clock and builds cost
    nothing. Both only ever go forward.
    """

    def __init__(self, cost: float) -> None:
        self._lock = threading.Lock()
        self._now = 0.0
        self._stood = 0.0  # wall seconds during which the CPU clock stood still
        self.cost = cost
        self.gil = True

    def wall(self) -> float:
        with self._lock:
            return self._now

    def cpu(self) -> float:
        with self._lock:
            return self._now - self._stood

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
            if self.gil:
                self._stood += seconds

    def release_gil(self) -> None:
        """From now on builds release the GIL (and cost nothing)."""
        with self._lock:
            self.gil = False

    def build(self) -> None:
        """A sample built on a thread of the test's process."""
        if self.gil:
            self.advance(self.cost)


CLOCKS: dict[str, GilClocks] = {}
"""The test process's clocks by name; empty in a worker process."""


@takes_rng
class ClockedJitter:
    """``jitter`` (of an ``Unpicklable``'s values), advancing the clocks named ``key`` when
    they exist in this process."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self, sample: Any, rng: SampleRng) -> Any:
        clocks = CLOCKS.get(self.key)
        if clocks is not None:
            clocks.build()
        values: npt.NDArray[np.float32] = getattr(sample, "values", sample)
        return jitter(values, rng)


class Unpicklable:
    """A sample that cannot reach a worker process (it holds a lock)."""

    def __init__(self, values: npt.NDArray[np.float32]) -> None:
        self.values = values
        self.lock = threading.Lock()


@takes_plan
def stack_with_step(samples: Sequence[Any], plan: BatchPlan) -> dict[str, Any]:
    """The samples stacked, with the step and its indices."""
    return {"x": np.stack(samples), "step": plan.global_step, "indices": plan.indices.copy()}
