"""The synchronous half of a step: transform every sample, then collate (a pure function)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._compat import add_note
from ..core._plan import BatchPlan
from ..core._rng import SampleRng

Transform = Callable[[Any, SampleRng], Any]


def build_batch(
    plan: BatchPlan,
    samples: Sequence[Any],
    transform: Transform | None,
    collator: Callable[[Sequence[Any], BatchPlan], Any],
) -> Any:
    """``collator([transform(sample, SampleRng(derive(seed, e, s, slot, 0)))...], plan)``."""
    if transform is not None:
        keys = plan.transform_keys().tolist()
        transformed = []
        for slot, sample in enumerate(samples):
            try:
                transformed.append(transform(sample, SampleRng(keys[slot])))
            except Exception as error:
                add_note(
                    error,
                    f"aioloader: in the transform of global step {plan.global_step} "
                    f"(epoch {plan.epoch}, step {plan.step}), slot {slot}, "
                    f"dataset index {int(plan.indices[slot])}",
                )
                raise
        samples = transformed
    try:
        return collator(samples, plan)
    except Exception as error:
        add_note(
            error,
            f"aioloader: in the collator of global step {plan.global_step} "
            f"(epoch {plan.epoch}, step {plan.step}), dataset indices {plan.indices.tolist()}",
        )
        raise
