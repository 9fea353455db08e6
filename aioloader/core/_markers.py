"""Markers: a transform that wants its rng, or a collator that wants the plan, says so.

The loader calls an unmarked transform as ``transform(sample)`` and an unmarked collator as
``collator(samples)``, so plain functions (``np.stack``, ``torch.stack``, a lambda over a
list) work as they are. ``@takes_rng`` makes it ``transform(sample, rng)`` (a
``SampleRng``), ``@takes_plan`` makes it ``collator(samples, plan)`` (a ``BatchPlan``).

>>> @takes_rng
... def flip(sample, rng):
...     return sample[::-1] if rng.random() < 0.5 else sample
>>> wants_rng(flip), wants_rng(len), wants_plan(flip)
(True, None, None)
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

RNG_MARK = "__aioloader_takes_rng__"
"""The attribute ``@takes_rng`` sets (on a function, a class or an instance)."""

PLAN_MARK = "__aioloader_takes_plan__"
"""The attribute ``@takes_plan`` sets."""

KEY_MARK = "__aioloader_takes_key__"
"""The attribute ``@takes_key`` sets (on a source's decoder)."""

_DECORATORS = {RNG_MARK: "takes_rng", PLAN_MARK: "takes_plan", KEY_MARK: "takes_key"}

F = TypeVar("F", bound=Callable[..., Any])


class Marked:
    """A callable that cannot carry an attribute (a builtin, a bound method, an instance
    with ``__slots__``), marked: it forwards every call unchanged.

    Attributes:
        function: the callable it forwards to.
        mark: ``RNG_MARK`` or ``PLAN_MARK``.
    """

    __slots__ = ("function", "mark")

    def __init__(self, function: Callable[..., Any], mark: str) -> None:
        self.function = function
        self.mark = mark

    def __call__(self, *args: Any) -> Any:
        return self.function(*args)

    def __getattr__(self, name: str) -> Any:
        if name not in ("function", "mark") and name == self.mark:
            return True
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"{_DECORATORS[self.mark]}({self.function!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Marked, (self.function, self.mark))


def _mark(function: F, mark: str, name: str) -> F:
    if not callable(function):
        raise TypeError(f"{name} must mark a callable but got {type(function).__name__}")
    try:
        setattr(function, mark, True)
    except (AttributeError, TypeError):
        return Marked(function, mark)  # type: ignore[return-value]  # calls as function does
    return function


def takes_rng(function: F) -> F:
    """Mark a transform that is called as ``transform(sample, rng)``.

    ``rng`` is the sample's ``SampleRng``: a pure function of ``(seed, epoch, step, slot)``,
    so a random crop or flip is the same on every run and after a resume. Works on a
    function, a class (its instances are marked, subclasses too) or any callable object
    (one that cannot take an attribute is wrapped in a forwarding ``Marked``).

    >>> @takes_rng
    ... class Jitter:
    ...     def __call__(self, sample, rng):
    ...         return sample + rng.integers(0, 3)
    >>> wants_rng(Jitter())
    True
    """
    return _mark(function, RNG_MARK, "takes_rng")


def takes_plan(function: F) -> F:
    """Mark a collator that is called as ``collator(samples, plan)``.

    ``plan`` is the step's ``BatchPlan`` (global step, epoch, step, dataset indices and the
    per-slot keys of stream 1 for batch-level augmentation). Works on what ``takes_rng``
    works on.

    >>> import numpy as np
    >>> stamp = takes_plan(lambda samples, plan: (plan.global_step, np.stack(samples)))
    >>> wants_plan(stamp), wants_plan(np.stack)
    (True, None)
    """
    return _mark(function, PLAN_MARK, "takes_plan")


def takes_key(function: F) -> F:
    """Mark a source's decoder that is called as ``decode(data, index, key)``.

    ``key`` is where the sample came from: the ``Path`` of a local file, the key of an
    object. An unmarked decoder is called as ``decode(data, index)``. Works on what
    ``takes_rng`` works on.

    >>> named = takes_key(lambda data, index, key: (key, len(data)))
    >>> wants_key(named), wants_key(len)
    (True, None)
    """
    return _mark(function, KEY_MARK, "takes_key")


def _declared(function: Any, mark: str) -> bool | None:
    value = getattr(function, mark, None)
    return value if isinstance(value, bool) else None


def wants_rng(transform: Any) -> bool | None:
    """``True`` (or ``False``) where ``transform`` declares whether it takes an rng, else None."""
    return _declared(transform, RNG_MARK)


def wants_plan(collator: Any) -> bool | None:
    """``True`` (or ``False``) where ``collator`` declares whether it takes the plan, else None."""
    return _declared(collator, PLAN_MARK)


def wants_key(decode: Any) -> bool | None:
    """``True`` (or ``False``) where ``decode`` declares whether it takes the key, else None."""
    return _declared(decode, KEY_MARK)


_PACKAGE = str(Path(__file__).resolve().parents[1]) + os.sep
_WARNED: set[object] = set()


def callable_name(function: Any) -> str:
    """``function``'s qualified name, or its repr (a callable object)."""
    return str(getattr(function, "__qualname__", None) or repr(function))


def _identity(function: Any) -> object:
    """What one deprecation warning is given per: the code of a function or method (a
    lambda made again is the same), the class of a callable object."""
    function = getattr(function, "__func__", function)
    code = getattr(function, "__code__", None)
    if code is not None:
        return code
    inner = getattr(function, "func", None)  # functools.partial
    return _identity(inner) if callable(inner) else type(function)


def _outside_frames() -> int:
    """The ``stacklevel`` of the first frame outside the package (the user's call)."""
    frame: FrameType | None = inspect.currentframe()
    level = 0
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    return max(level, 1)


def warn_signature_read(function: Any, role: str, argument: str, marker: str) -> None:
    """Warn (a ``DeprecationWarning``, once per function) that ``function`` gets
    ``argument`` because of its signature, naming the marker that keeps it."""
    identity = _identity(function)
    if identity in _WARNED:
        return
    _WARNED.add(identity)
    warnings.warn(
        f"aioloader: the {role} {callable_name(function)} gets the {argument} because of its "
        f"signature, which is deprecated (a signature will not be read): mark it "
        f"@{marker} (from aioloader import {marker}) to keep getting the {argument}, or "
        f"give it {'two parameters' if marker == 'takes_key' else 'one parameter'}",
        DeprecationWarning,
        stacklevel=_outside_frames(),
    )
