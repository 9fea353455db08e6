"""The loader's resume state: a cursor plus a fingerprint of what decides the stream."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ..core._check import u64


def describe_stream(sampler: Any, dataset_length: int | None) -> str:
    """The sampler's kind and arguments and the dataset length, in words.

    Global-batch sharding (anything with a ``global_sampler`` or a ``RankSlice``) is
    described by the global sampler, so a checkpoint resumes on any number of ranks.
    """
    from ..core._sharding import RankSlice

    while isinstance(sampler, RankSlice):
        sampler = sampler.sampler
    length = "unknown length" if dataset_length is None else f"{dataset_length} items"
    return f"{sampler!r} over a dataset of {length}"


def stream_fingerprint(sampler: Any, dataset_length: int | None, seed: int) -> tuple[str, str]:
    """``(fingerprint, description)``: a short hash of the description and the seed."""
    description = describe_stream(sampler, dataset_length)
    digest = hashlib.sha256(f"{description}\0{seed}".encode()).hexdigest()[:16]
    return digest, description


def check_state(
    state: Any,
    version: int,
    seed: int,
    fingerprint: str,
    description: str,
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
    if isinstance(saved_version, bool) or saved_version not in (1, version):
        raise ValueError(
            f"state['version'] must be 1 or {version} (what this aioloader writes) but got "
            f"{saved_version!r}"
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
        if saved != fingerprint:
            raise ValueError(
                "state['fingerprint'] must match this loader's stream but the state was "
                f"saved for {state.get('stream', '?')!s} (fingerprint {saved}) and this "
                f"loader streams {description} (fingerprint {fingerprint}); pass "
                "check_stream=False to resume the new stream at the saved step on purpose"
            )
    return next_step
