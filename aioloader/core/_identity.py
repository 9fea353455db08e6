"""What a checkpoint remembers of a sampler: its kind and the fields that decide its stream.

Every sampler of ``aioloader.core`` declares them with ``fingerprint_fields()``; a sampler
of your own does the same (docs/samplers.md, "Writing your own"). The fields are JSON data,
so the identity is the same in every process, unlike a ``repr`` that holds an address.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

FINGERPRINT_HOOK = "fingerprint_fields"
"""The method a sampler defines to say which fields decide its stream."""


def values_digest(values: Any) -> str:
    """A short digest of integer values (the ``lengths`` of a sampler, say) for its fields.

    >>> values_digest([3, 1, 2]) == values_digest((3, 1, 2))
    True
    """
    array = np.ascontiguousarray(np.asarray(values).astype("<i8", copy=False))
    return hashlib.sha256(array.tobytes()).hexdigest()[:32]


def sampler_identity(sampler: Any) -> dict[str, Any]:
    """``{"kind": class name, "fields": sampler.fingerprint_fields()}``, checked to be JSON.

    A sampler without ``fingerprint_fields()`` is refused with an error naming its type and
    the method to define.
    """
    kind = type(sampler).__name__
    hook = getattr(sampler, FINGERPRINT_HOOK, None)
    if not callable(hook):
        raise TypeError(
            f"sampler must define {FINGERPRINT_HOOK}() to be saved or resumed but "
            f"{kind} has none: return JSON data of what decides its batches (say "
            '{"n": ..., "batch_size": ...}), the same in every process; see "Writing your '
            'own" in docs/samplers.md'
        )
    fields = hook()
    try:
        json.dumps(fields, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"{kind}.{FINGERPRINT_HOOK}() must return JSON data (dict with str keys, list, "
            f"str, int, float, bool, None) but got {fields!r} ({error})"
        ) from None
    return {"kind": kind, "fields": fields}


__all__ = ("FINGERPRINT_HOOK", "sampler_identity", "values_digest")
