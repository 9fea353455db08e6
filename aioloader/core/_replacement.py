"""The index that replaces a bad sample: a pure function of (seed, step, slot, attempt).

``DataLoader(on_error="skip")`` replaces a sample whose read or transform raised by
another index of the dataset. Attempt ``a`` (``a >= 1``) of slot ``slot`` at global step
``g = epoch * S + step`` draws the ``a``-th ``next_int(items)`` of
``SampleRng(derive(seed, epoch, step, slot, RngStream.REPLACE_SAMPLE))``, so the batches
stay a pure function of ``(seed, g)`` and of the set of samples that fail.

>>> [replacement_index(7, 0, 0, 3, attempt, 40) for attempt in (1, 2, 3)]
[10, 21, 3]
"""

from __future__ import annotations

from ._check import positive_int, u64
from ._rng import SampleRng, derive
from ._streams import RngStream

__all__ = ("replacement_index",)


def replacement_index(seed: int, epoch: int, step: int, slot: int, attempt: int, items: int) -> int:
    """The dataset index tried at ``attempt`` (1-based) for ``slot`` of ``(epoch, step)``.

    Args:
        seed: the run's seed.
        epoch: the epoch of the step.
        step: the step within the epoch.
        slot: the position of the sample in the batch.
        attempt: 1 for the first replacement, 2 if that one failed too, and so on.
        items: the number of dataset items to draw from, ``[0, items)``.
    """
    rng = SampleRng(derive(seed, epoch, step, slot, RngStream.REPLACE_SAMPLE))
    draws = positive_int("attempt", attempt)
    bound = positive_int("items", items)
    u64("slot", slot)
    index = 0
    for _ in range(draws):
        index = rng.next_int(bound)
    return index
