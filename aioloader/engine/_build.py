"""The synchronous half of a step: transform every sample, then collate (a pure function)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from .._compat import add_note
from ..core._plan import BatchPlan
from ..core._rng import SampleRng

Transform = Callable[..., Any]
"""``transform(sample, rng) -> sample`` or, for a transform without randomness,
``transform(sample) -> sample``."""


def transform_takes_rng(transform: Callable[..., Any]) -> bool:
    """Whether ``transform`` accepts a second positional argument (its ``SampleRng``).

    A transform of one parameter is called as ``transform(sample)``: no rng is derived
    for it. When the signature cannot be read (some builtins), the rng is passed.
    """
    try:
        signature = inspect.signature(transform)
    except (TypeError, ValueError):
        return True
    positional = 0
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            return True
        if parameter.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            positional += 1
    return positional >= 2


def _transform_note(error: BaseException, plan: BatchPlan, slot: int) -> None:
    add_note(
        error,
        f"aioloader: in the transform of global step {plan.global_step} "
        f"(epoch {plan.epoch}, step {plan.step}), slot {slot}, "
        f"dataset index {int(plan.indices[slot])}",
    )


def build_batch(
    plan: BatchPlan,
    samples: Sequence[Any],
    transform: Transform | None,
    collator: Callable[[Sequence[Any], BatchPlan], Any],
    takes_rng: bool | None = None,
) -> Any:
    """``collator([transform(sample, SampleRng(derive(seed, e, s, slot, 0)))...], plan)``.

    ``takes_rng`` (default: read from the transform's signature) says whether the
    transform receives its rng; the per-slot keys are derived only when it does.
    """
    if transform is not None:
        if takes_rng is None:
            takes_rng = transform_takes_rng(transform)
        slot = 0
        try:
            if takes_rng:
                keys = plan.transform_keys().tolist()
                transformed = [
                    transform(sample, SampleRng(keys[slot := index]))
                    for index, sample in enumerate(samples)
                ]
            else:
                transformed = []
                append = transformed.append
                for slot, sample in enumerate(samples):  # noqa: B007 - read on error
                    append(transform(sample))
        except Exception as error:
            _transform_note(error, plan, slot)
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
