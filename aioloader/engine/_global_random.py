"""A dataset, transform or collator that draws from a global generator: found on the first
batch, warned about once.

``random``, ``numpy.random``'s legacy functions and torch's default generator (where the
program has imported torch) are shared by the whole process, and drawn from in whatever
order reads and builds happen to run, so two runs differ and a resumed run does not repeat
its batches. The check compares their states when a loader's first stream opens and when its
first batch has been built (on whichever thread built it): a change means the reads, the
transform or the collator drew from one. It runs once per loader, for build threads and for
``workers=0`` (a process build draws in another process). Another thread of the program
drawing from a global generator during that first batch reads the same.
"""

from __future__ import annotations

import random
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core import BatchPlan, takes_plan

State = dict[str, Any]


class GlobalRandomWarning(UserWarning):
    """The loader's first batch drew from a global random generator (``random``,
    ``numpy.random``, torch's): the batches are not a function of the seed, so runs differ
    and a resume does not repeat them. Draw from the per-sample rng of a ``@takes_rng``
    ``transform(sample, rng)`` instead (docs/from-torch.md)."""


def global_states() -> State:
    """The states of the global generators (torch's only where torch is imported)."""
    states: State = {
        "random": random.getstate(),
        "numpy.random": np.random.get_state(legacy=True),
    }
    torch: Any = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_rng_state"):
        states["torch"] = torch.get_rng_state()
    return states


def _same(before: Any, after: Any) -> bool:
    if isinstance(before, tuple):  # numpy's (name, keys, pos, has_gauss, cached)
        return len(before) == len(after) and all(map(_same, before, after))
    if isinstance(before, np.ndarray):
        return bool(np.array_equal(before, after))
    equal = getattr(before, "equal", None)  # a torch tensor
    if callable(equal):
        return bool(equal(after))
    return bool(before == after)


def changed(before: State, after: State) -> list[str]:
    """The names of the generators whose state differs."""
    return [name for name in before if name in after and not _same(before[name], after[name])]


def _message(names: list[str]) -> str:
    return (
        f"aioloader: building the first batch drew from the global random generator(s) of "
        f"{', '.join(names)}, which the seed does not decide: two runs give different "
        "batches and a resumed run does not repeat its batches. Draw from the sample's own "
        "rng instead: mark the transform @takes_rng (from aioloader import takes_rng) and use "
        "transform(sample, rng) with rng.next_double() / rng.next_int(n) (a crop-and-flip "
        "recipe is in docs/from-torch.md)"
    )


@takes_plan
class FirstBatchCheck:
    """The loader's collator, with the global generators checked around the first batch.

    ``arm()`` (when a stream opens) records the states; the first batch built after it
    compares, warns with a ``GlobalRandomWarning`` if one changed, and disarms the check for
    good. Later batches only pay a test of one attribute.

    Attributes:
        collator: ``collator(samples, plan)``, called as it is.
    """

    __slots__ = ("_before", "_done", "_lock", "collator")

    def __init__(self, collator: Callable[[Sequence[Any], BatchPlan], Any]) -> None:
        self.collator = collator
        self._before: State | None = None
        self._done = False
        self._lock = threading.Lock()

    def arm(self) -> None:
        """Record the states, unless a first batch was already checked."""
        with self._lock:
            if not self._done:
                self._before = global_states()

    def __call__(self, samples: Sequence[Any], plan: BatchPlan) -> Any:
        batch = self.collator(samples, plan)
        if self._before is not None:
            self._check()
        return batch

    def _check(self) -> None:
        with self._lock:
            before, self._before = self._before, None
            if before is None:
                return
            self._done = True
        names = changed(before, global_states())
        if names:
            warnings.warn(_message(names), GlobalRandomWarning, stacklevel=2)

    def __repr__(self) -> str:
        return f"FirstBatchCheck({self.collator!r})"


__all__ = ("FirstBatchCheck", "GlobalRandomWarning", "changed", "global_states")
