"""The synchronous half of a step: transform every sample, then collate (a pure function)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from .._compat import add_note
from ..core import (
    BatchPlan,
    callable_name,
    sample_rngs,
    takes_plan,
    takes_rng,
    wants_plan,
    wants_rng,
    warn_signature_read,
)

Transform = Callable[..., Any]
"""``transform(sample) -> sample`` or, marked ``@takes_rng``, ``transform(sample, rng)``."""


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
    """Whether today's two-parameter form (deprecated) passes ``name`` (``rng`` or ``plan``)
    to a function of ``signature``: its second positional parameter is required, is called
    ``name``, or is ``*args``.

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


def _accepts_two(signature: inspect.Signature | None) -> bool:
    """Whether a function of ``signature`` can be called with two positional arguments."""
    if signature is None:
        return True  # unreadable: trust the mark
    positional = _positional(signature)
    return len(positional) >= 2 or any(
        parameter.kind is inspect.Parameter.VAR_POSITIONAL for parameter in positional
    )


def transform_takes_rng(transform: Callable[..., Any]) -> bool:
    """Whether ``transform`` is called as ``transform(sample, rng)``.

    It is when it is marked ``@takes_rng``. An unmarked transform is called as
    ``transform(sample)``, except in today's two-parameter form (its second positional
    parameter is required, is called ``rng``, or is ``*args``), which still gets its rng
    with a ``DeprecationWarning`` (once per function) naming the fix.

    Raises:
        TypeError: it is marked ``@takes_rng`` but takes one positional argument only.
    """
    return _second_argument(
        transform, wants_rng(transform), _signature(transform), "transform", "sample", "rng"
    )


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

    The plan is passed to a collator marked ``@takes_plan``. An unmarked one gets the
    samples only (torch's ``collate_fn(samples)``, ``numpy.stack``, ``torch.stack``),
    except in today's two-parameter form (its second positional parameter is required, is
    called ``plan``, or is ``*args``), which still gets the plan with a
    ``DeprecationWarning`` (once per function) naming the fix.

    Raises:
        TypeError: the signature fits neither (no positional parameter, more than two
            required ones, or a required keyword-only one), or it is marked ``@takes_plan``
            but takes one positional argument only.
    """
    declared = wants_plan(collator)
    signature = _signature(collator)
    if signature is not None:
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
                f"{callable_name(collator)!r} has the signature {signature}"
            )
    return _second_argument(collator, declared, signature, "collator", "samples", "plan")


def _second_argument(
    function: Any,
    declared: bool | None,
    signature: inspect.Signature | None,
    role: str,
    first: str,
    second: str,
) -> bool:
    """Whether ``function`` (a transform or collator) gets ``second``: as its marker
    (``@takes_rng``, ``@takes_plan``) declares, else, deprecated, as its signature says."""
    marker = takes_rng.__name__ if second == "rng" else takes_plan.__name__
    if declared is not None:
        if declared and not _accepts_two(signature):
            raise TypeError(
                f"{role} is marked @{marker} so must accept {role}({first}, {second}) but "
                f"{callable_name(function)!r} has the signature {signature}"
            )
        return declared
    if _takes_second(signature, second):
        warn_signature_read(function, role, second, marker)
        return True
    return False


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
        samples = transform_slots(plan, samples, 0, len(samples), transform, takes_rng)
    return collate_batch(plan, samples, collator)


def transform_slots(
    plan: BatchPlan,
    samples: Sequence[Any],
    start: int,
    stop: int,
    transform: Transform,
    takes_rng: bool | None = None,
) -> list[Any]:
    """The transform of slots ``[start, stop)`` of ``plan`` (``samples`` holds every slot):
    a part of ``build_batch``, so that several threads may share one batch."""
    if takes_rng is None:
        takes_rng = transform_takes_rng(transform)
    transformed: list[Any] = []
    append = transformed.append
    slot = start
    try:
        if takes_rng:
            rngs = sample_rngs(plan.transform_keys()[start:stop].tolist())
            for slot in range(start, stop):
                append(transform(samples[slot], rngs[slot - start]))
        else:
            for slot in range(start, stop):
                append(transform(samples[slot]))
    except Exception as error:
        _transform_note(error, plan, slot)
        raise
    return transformed


def collate_batch(
    plan: BatchPlan,
    samples: Sequence[Any],
    collator: Callable[[Sequence[Any], BatchPlan], Any],
) -> Any:
    """``collator(samples, plan)``, an error noting the step and its dataset indices."""
    try:
        return collator(samples, plan)
    except Exception as error:
        add_note(
            error,
            f"aioloader: in the collator of global step {plan.global_step} "
            f"(epoch {plan.epoch}, step {plan.step}), dataset indices {plan.indices.tolist()}",
        )
        raise
