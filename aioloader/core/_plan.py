"""From a global step to the plan of its batch: epoch, step in epoch, indices, rng keys."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ._check import U64_LIMIT, u64
from ._rng import derive_slots
from ._samplers import IndexArray, Sampler
from ._streams import RngStream


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """Everything that decides the batch at one global step (pure data)."""

    seed: int
    global_step: int
    epoch: int
    step: int
    indices: IndexArray
    slots: IndexArray | None = None

    @property
    def size(self) -> int:
        """Number of samples in the batch."""
        return int(self.indices.shape[0])

    def rng_keys(self, stream: int) -> npt.NDArray[np.uint64]:
        """``derive(seed, epoch, step, slot, stream)`` for every slot, in one array call.

        Under rank sharding ``slots`` holds the positions in the global batch, so every
        rank draws what a single process would draw for the same sample.
        """
        lanes = self.size if self.slots is None else self.slots
        return derive_slots(self.seed, self.epoch, self.step, lanes, stream)

    def transform_keys(self) -> npt.NDArray[np.uint64]:
        """Per-slot keys of the loader transform (stream 0)."""
        return self.rng_keys(RngStream.TRANSFORM)

    def augment_keys(self) -> npt.NDArray[np.uint64]:
        """Per-slot keys of the collator augmentation (stream 1)."""
        return self.rng_keys(RngStream.AUGMENT)


def split_global_step(global_step: int, steps_per_epoch: int) -> tuple[int, int]:
    """``(g // S, g % S)``."""
    g = u64("global_step", global_step)
    if steps_per_epoch <= 0:
        raise ValueError(
            f"steps_per_epoch must be >= 1 but got {steps_per_epoch} (fewer items than one batch)"
        )
    return divmod(g, steps_per_epoch)


def plan_batch(sampler: Sampler, seed: int, global_step: int) -> BatchPlan:
    """The plan of the batch at ``global_step``.

    >>> from aioloader.core import SequentialSampler
    >>> plan_batch(SequentialSampler(10, 4), 0, 3).indices.tolist()
    [4, 5, 6, 7]
    """
    steps = sampler.steps_per_epoch
    if type(seed) is int and type(global_step) is int and 0 <= seed < U64_LIMIT:  # the engine's
        if not 0 <= global_step < U64_LIMIT or steps <= 0:
            split_global_step(global_step, steps)  # raises what the checks below would
        seed_value = seed
        epoch, step = divmod(global_step, steps)
    else:
        seed_value = u64("seed", seed)
        epoch, step = split_global_step(global_step, steps)
    indices = sampler.indices(seed_value, epoch, step)
    global_slots = getattr(sampler, "global_slots", None)
    slots = global_slots(seed_value, epoch, step) if callable(global_slots) else None
    return BatchPlan(seed_value, int(global_step), epoch, step, indices, slots)
