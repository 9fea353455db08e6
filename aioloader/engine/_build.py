"""The synchronous half of a step: transform every sample, then collate (a pure function)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from .._compat import add_note
from ..core._plan import BatchPlan
from ..core._rng import sample_rngs

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


TRANSFORM_SLOT = "__aioloader_transform_slot__"
"""The attribute set on an error of the transform: the slot it failed on (it pickles)."""


class SamplesOnlyCollator:
    """A torch-style ``collate(samples)`` called as the loader calls collators.

    Attributes:
        collate: the user's one-argument collator.
    """

    __slots__ = ("collate",)

    def __init__(self, collate: Callable[[Sequence[Any]], Any]) -> None:
        self.collate = collate

    def __call__(self, samples: Sequence[Any], plan: BatchPlan) -> Any:
        return self.collate(samples)

    def __repr__(self) -> str:
        return f"SamplesOnlyCollator({self.collate!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (SamplesOnlyCollator, (self.collate,))


def collator_takes_plan(collator: Callable[..., Any]) -> bool:
    """Whether ``collator`` is called as ``(samples, plan)`` (True) or ``(samples)``.

    Read once from the signature: a collator that accepts two positional arguments gets the
    plan; one that accepts exactly one (torch's ``collate_fn(samples)``) does not. When the
    signature cannot be read (some builtins), the plan is passed.

    Raises:
        TypeError: the signature fits neither (no positional parameter, more than two
            required ones, or a required keyword-only one).
    """
    try:
        signature = inspect.signature(collator)
    except (TypeError, ValueError):
        return True
    accepted = 0
    required = 0
    for parameter in signature.parameters.values():
        kind = parameter.kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            accepted = 2
        elif kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            accepted += 1
            required += parameter.default is inspect.Parameter.empty
        elif (
            kind is inspect.Parameter.KEYWORD_ONLY and parameter.default is inspect.Parameter.empty
        ):
            required = 3
    if accepted < 1 or required > 2:
        raise TypeError(
            "collator must accept collator(samples, plan) or collator(samples) but "
            f"{getattr(collator, '__qualname__', collator)!r} has the signature {signature}"
        )
    return accepted >= 2


def _transform_note(error: BaseException, plan: BatchPlan, slot: int) -> None:
    setattr(error, TRANSFORM_SLOT, slot)
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
                rngs = sample_rngs(plan.transform_keys().tolist())
                transformed = [
                    transform(sample, rngs[slot := index]) for index, sample in enumerate(samples)
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
