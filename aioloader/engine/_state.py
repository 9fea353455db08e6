"""The loader's resume state: a cursor plus a fingerprint of what decides the stream.

Version 3 fingerprints the sampler's kind and declared ``fingerprint_fields()`` (the same
in every process); version 2 hashed its ``repr`` and is still checked that way; version 1
carries no fingerprint.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ..core import RankSlice, sampler_identity, u64

LEGACY_REPR_VERSION = 2
"""The state version whose fingerprint hashed ``repr(sampler)``."""


def _global(sampler: Any) -> Any:
    """Global-batch sharding (``RankSlice``) is identified by its global sampler."""
    while isinstance(sampler, RankSlice):
        sampler = sampler.sampler
    return sampler


def describe_stream(sampler: Any, dataset_length: int | None) -> str:
    """The sampler's kind and arguments and the dataset length, in words.

    Global-batch sharding (``RankSlice``) is described by the global sampler, so a
    checkpoint resumes on any number of ranks.
    """
    length = "unknown length" if dataset_length is None else f"{dataset_length} items"
    return f"{_global(sampler)!r} over a dataset of {length}"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def stream_fingerprint(sampler: Any, dataset_length: int | None, seed: int) -> str:
    """A short hash of the sampler's kind and fields, the dataset length and the seed.

    Raises a ``TypeError`` naming the sampler's type when it has no ``fingerprint_fields()``.
    """
    identity = {
        "sampler": sampler_identity(_global(sampler)),
        "dataset_length": dataset_length,
        "seed": seed,
    }
    return _short_hash(json.dumps(identity, sort_keys=True, separators=(",", ":")))


def legacy_fingerprint(sampler: Any, dataset_length: int | None, seed: int) -> str:
    """The fingerprint a version-2 state carries: a hash of the description and the seed."""
    return _short_hash(f"{describe_stream(sampler, dataset_length)}\0{seed}")


def check_state(
    state: Any,
    version: int,
    seed: int,
    sampler: Any,
    dataset_length: int | None,
    *,
    check_stream: bool,
) -> int:
    """The ``next_step`` of a saved state, after checking it belongs to this stream.

    Each field is checked on its own first (version, then the types and ranges of
    ``seed`` and ``next_step``), so a malformed state is named by its bad field, never
    reported as a fingerprint mismatch.
    """
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a mapping but got {type(state).__name__}")
    missing = {"seed", "next_step"} - set(state)
    if missing:
        raise ValueError(f"state must have keys seed and next_step but lacks {sorted(missing)}")
    saved_version = state.get("version", 1)
    known = range(1, version + 1)
    if isinstance(saved_version, bool) or saved_version not in known:
        listed = ", ".join(map(str, known[:-1]))
        raise ValueError(
            f"state['version'] must be {listed} or {version} (what this aioloader writes) "
            f"but got {saved_version!r}"
        )
    saved_seed = u64("state['seed']", state["seed"])
    next_step = u64("state['next_step']", state["next_step"])
    if saved_seed != seed:
        raise ValueError(f"state['seed'] must equal the loader's seed {seed} but got {saved_seed}")
    if check_stream and saved_version != 1:
        saved = state.get("fingerprint")
        if not isinstance(saved, str):
            raise TypeError(
                "state['fingerprint'] must be the str that state_dict() wrote but got "
                f"{type(saved).__name__} ({saved!r})"
            )
        legacy = saved_version == LEGACY_REPR_VERSION
        fingerprint = (legacy_fingerprint if legacy else stream_fingerprint)(
            sampler, dataset_length, seed
        )
        if saved != fingerprint:
            older = (
                " (a version-2 state: its fingerprint hashed repr(sampler), which for a "
                "sampler without its own __repr__ holds a memory address)"
                if legacy
                else ""
            )
            raise ValueError(
                "state['fingerprint'] must match this loader's stream but the state was "
                f"saved for {state.get('stream', '?')!s} (fingerprint {saved}){older} and this "
                f"loader streams {describe_stream(sampler, dataset_length)} (fingerprint "
                f"{fingerprint}); pass check_stream=False to resume the new stream at the "
                "saved step on purpose"
            )
    return next_step
