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


def _signature(function: Callable[..., Any]) -> inspect.Signature | None:
    """``function``'s signature, or ``None`` when it cannot be read (some builtins)."""
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):
        return None


def _positional(signature: inspect.Signature) -> list[inspect.Parameter]:
    """The parameters that take a positional argument, ``*args`` included."""
    return [
        parameter
        for parameter in signature.parameters.values()
        if parameter.kind
        in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.VAR_POSITIONAL,
        )
    ]


def _takes_second(signature: inspect.Signature | None, name: str) -> bool:
    """Whether a function of ``signature`` means its second positional argument to be the
    loader's ``name`` (``rng`` or ``plan``): a required parameter, one called ``name``, or
    ``*args``.

    A second parameter with a default under another name (``numpy.stack(arrays, axis=0)``)
    is an option of the function, not a slot for the loader's argument; neither is anything
    of a function whose signature cannot be read (``None``: a builtin such as
    ``torch.stack``).
    """
    if signature is None:
        return False
    positional = _positional(signature)
    if positional and positional[0].kind is inspect.Parameter.VAR_POSITIONAL:
        return True
    if len(positional) < 2:
        return False
    second = positional[1]
    return (
        second.kind is inspect.Parameter.VAR_POSITIONAL
        or second.default is inspect.Parameter.empty
        or second.name == name
    )


def transform_takes_rng(transform: Callable[..., Any]) -> bool:
    """Whether ``transform`` is called as ``transform(sample, rng)``.

    It is when its second positional parameter is required, is called ``rng``, or is
    ``*args``. Otherwise (one parameter, an optional second one under another name such
    as ``numpy.asarray(a, dtype=None)``, or a signature that cannot be read) it is called
    as ``transform(sample)`` and no rng is derived for it.
    """
    return _takes_second(_signature(transform), "rng")


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

    Read once from the signature: the plan is passed when the second positional parameter
    is required, is called ``plan``, or is ``*args``. A collator of one parameter (torch's
    ``collate_fn(samples)``), one whose second parameter is an option under another name
    (``numpy.stack(arrays, axis=0)``) and one whose signature cannot be read (a builtin
    such as ``torch.stack``) get the samples only.

    Raises:
        TypeError: the signature fits neither (no positional parameter, more than two
            required ones, or a required keyword-only one).
    """
    signature = _signature(collator)
    if signature is None:
        return False
    positional = _positional(signature)
    required = sum(
        parameter.default is inspect.Parameter.empty
        and parameter.kind is not inspect.Parameter.VAR_POSITIONAL
        for parameter in positional
    )
    keyword_only = any(
        parameter.kind is inspect.Parameter.KEYWORD_ONLY
        and parameter.default is inspect.Parameter.empty
        for parameter in signature.parameters.values()
    )
    if not positional or required > 2 or keyword_only:
        raise TypeError(
            "collator must accept collator(samples, plan) or collator(samples) but "
            f"{getattr(collator, '__qualname__', collator)!r} has the signature {signature}"
        )
    return _takes_second(signature, "plan")


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
