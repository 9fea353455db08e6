"""The loader's bad-sample policy: ``DataLoader(on_error="raise" | "skip" | handler)``.

With ``"skip"`` a sample whose read or transform raises is replaced by the index
``replacement_index(seed, epoch, step, slot, attempt, items)`` (a pure function, rng stream
``REPLACE_SAMPLE``), tried up to ``MAX_ATTEMPTS`` times per slot. A handler
``on_error(error, index) -> sample | None`` is asked first: the sample it returns takes the
slot (and goes through the transform); ``None`` skips as ``"skip"`` does. Each failure is
counted in the loader's statistics and logged as a warning on the ``aioloader.samples``
logger (a logging record, not a ``warnings`` warning, so ``filterwarnings=error`` users
keep running).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from .._compat import add_note
from ..core import BatchPlan, replacement_index

__all__ = (
    "MAX_ATTEMPTS",
    "MAX_SKIPPED_KEPT",
    "BadSampleError",
    "ErrorPolicy",
    "SkippedSample",
    "StepRepairs",
    "check_on_error",
)

MAX_ATTEMPTS = 16
"""Failures allowed per slot of a step before ``BadSampleError`` ends the stream."""
MAX_SKIPPED_KEPT = 32
"""How many skipped samples ``LoaderStatistics.skipped`` keeps (the first ones)."""

logger = logging.getLogger("aioloader.samples")

ErrorHandler = Callable[[Exception, int], Any]
"""``on_error(error, index) -> sample | None``: a sample for the slot, or None to skip."""


class SkippedSample(NamedTuple):
    """One sample that failed and was replaced.

    Attributes:
        global_step: the step it belonged to.
        slot: its position in the batch.
        dataset_index: the dataset index that failed.
        reason: the error, with the notes the source attached (the path, say).
    """

    global_step: int
    slot: int
    dataset_index: int
    reason: str


class BadSampleError(RuntimeError):
    """Every attempt for one slot failed; the message lists each index and its error."""


@dataclass(frozen=True, slots=True)
class ErrorPolicy:
    """A checked ``on_error`` other than ``"raise"``.

    Attributes:
        handler: the user's ``on_error(error, index)``, or None for ``"skip"``.
        items: replacements are drawn from ``[0, items)``.
        seed: the run's seed.
    """

    handler: ErrorHandler | None
    items: int
    seed: int


def check_on_error(on_error: Any, items: int | None, seed: int) -> ErrorPolicy | None:
    """The policy of ``on_error`` (None for ``"raise"``), or a clear error."""
    if isinstance(on_error, str):
        if on_error == "raise":
            return None
        if on_error != "skip":
            raise ValueError(
                f"on_error must be 'raise', 'skip' or a callable on_error(error, index) but "
                f"got {on_error!r}"
            )
        handler = None
    elif callable(on_error):
        handler = on_error
    else:
        raise TypeError(
            "on_error must be 'raise', 'skip' or a callable on_error(error, index) but got "
            f"{type(on_error).__name__}"
        )
    if items is None or items < 1:
        raise ValueError(
            "on_error other than 'raise' needs the number of dataset items to draw "
            "replacements from (len(dataset) or the sampler's item count) but neither is known"
        )
    return ErrorPolicy(handler, items, seed)


def describe_error(error: BaseException) -> str:
    """``Type: message``, then the notes attached on the way (the path, the step)."""
    notes = getattr(error, "__notes__", None) or ()
    return "; ".join([f"{type(error).__name__}: {error}", *map(str, notes)])


class StepRepairs:
    """The failures of one step's slots and the index each slot holds now."""

    __slots__ = ("counters", "failures", "indices", "plan", "policy")

    def __init__(self, policy: ErrorPolicy, plan: BatchPlan, counters: Any) -> None:
        self.policy = policy
        self.plan = plan
        self.counters = counters
        self.indices: list[int] = plan.indices.tolist()
        self.failures: dict[int, list[tuple[int, str]]] = {}

    async def replace(
        self, slot: int, error: Exception, read_one: Callable[[int], Awaitable[Any]]
    ) -> Any:
        """A sample for ``slot``, whose current index failed with ``error``.

        Asks the handler, else reads replacement indices until one reads; raises
        ``BadSampleError`` after ``MAX_ATTEMPTS`` failures of the slot.
        """
        plan = self.plan
        policy = self.policy
        while True:
            index = self.indices[slot]
            reason = describe_error(error)
            attempts = self.failures.setdefault(slot, [])
            attempts.append((index, reason))
            if len(attempts) >= MAX_ATTEMPTS:
                listed = "\n".join(f"  index {i}: {why}" for i, why in attempts)
                raise BadSampleError(
                    f"{len(attempts)} samples failed in a row for slot {slot} of global step "
                    f"{plan.global_step} (on_error gives up after {MAX_ATTEMPTS}):\n{listed}"
                ) from error
            self._count(slot, index, reason)
            if policy.handler is not None:
                sample = policy.handler(error, index)
                if sample is not None:
                    return sample
            index = replacement_index(
                policy.seed, plan.epoch, plan.step, slot, len(attempts), policy.items
            )
            self.indices[slot] = index
            try:
                return await read_one(index)
            except Exception as failure:
                add_note(
                    failure,
                    f"aioloader: while reading replacement {len(attempts)} for slot {slot} of "
                    f"global step {plan.global_step}, dataset index {index}",
                )
                error = failure

    def _count(self, slot: int, index: int, reason: str) -> None:
        counters = self.counters
        counters.samples_skipped += 1
        if len(counters.skipped) < MAX_SKIPPED_KEPT:
            counters.skipped.append(SkippedSample(self.plan.global_step, slot, index, reason))
        logger.warning(
            "aioloader: skipped dataset index %d (global step %d, slot %d): %s",
            index,
            self.plan.global_step,
            slot,
            reason,
        )
