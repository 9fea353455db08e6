"""Which data-parallel rank this process is: arguments, torch.distributed, or the environment.

Never imports torch: a process group can only be initialised once ``torch.distributed``
has been imported, so when it is not in ``sys.modules`` there is none to ask.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

from ..core import RankSlice, Sampler, as_int


class RankInfo(NamedTuple):
    """This process's place among ``world_size`` data-parallel processes."""

    rank: int
    world_size: int


def _from_process_group() -> tuple[int, int] | None:
    dist: Any = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return int(dist.get_rank()), int(dist.get_world_size())


def _env_int(environ: Mapping[str, str], name: str, low: int) -> int:
    text = environ[name]
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise ValueError(
            f"environment variable {name} must be a decimal integer but got {text!r}"
        ) from None
    if value < low:
        raise ValueError(f"environment variable {name} must be >= {low} but got {value}")
    return value


def _from_environment(environ: Mapping[str, str]) -> tuple[int, int] | None:
    has_rank, has_world = "RANK" in environ, "WORLD_SIZE" in environ
    if not (has_rank or has_world):
        return None
    if has_rank != has_world:
        present, absent = ("RANK", "WORLD_SIZE") if has_rank else ("WORLD_SIZE", "RANK")
        raise ValueError(
            f"environment variables RANK and WORLD_SIZE must be set together but {present} "
            f"is set ({environ[present]!r}) and {absent} is not"
        )
    rank = _env_int(environ, "RANK", 0)
    world_size = _env_int(environ, "WORLD_SIZE", 1)
    if rank >= world_size:
        raise ValueError(
            f"environment variable RANK must be < WORLD_SIZE = {world_size} but got {rank}"
        )
    return rank, world_size


def resolve_rank(
    rank: int | None = None,
    world_size: int | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> RankInfo:
    """This process's rank and world size.

    Explicit arguments win (both must be given, or neither); else an initialised
    ``torch.distributed`` process group; else the ``RANK`` and ``WORLD_SIZE`` environment
    variables (set by ``torchrun``); else rank 0 of 1.

    Args:
        rank: this process's rank, in ``[0, world_size)``.
        world_size: number of processes, >= 1.
        environ: where to read the variables (default ``os.environ``).

    >>> resolve_rank(1, 4)
    RankInfo(rank=1, world_size=4)
    >>> resolve_rank(environ={"RANK": "2", "WORLD_SIZE": "8"})
    RankInfo(rank=2, world_size=8)
    """
    if rank is not None or world_size is not None:
        if rank is None or world_size is None:
            given, missing = ("rank", "world_size") if rank is not None else ("world_size", "rank")
            raise ValueError(f"{given} and {missing} must be given together but {missing} is None")
        number, world = as_int("rank", rank), as_int("world_size", world_size)
        if world < 1:
            raise ValueError(f"world_size must be an integer >= 1 but got {world}")
        if not 0 <= number < world:
            raise ValueError(
                f"rank must be an integer in [0, world_size) = [0, {world}) but got {number}"
            )
        return RankInfo(number, world)
    group = _from_process_group()
    if group is not None:
        return RankInfo(*group)
    found = _from_environment(os.environ if environ is None else environ)
    if found is not None:
        return RankInfo(*found)
    return RankInfo(0, 1)


def rank_slice(
    sampler: Sampler,
    rank: int | None = None,
    world_size: int | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> RankSlice:
    """``RankSlice(sampler, rank, world_size)`` with the values of ``resolve_rank``.

    >>> from aioloader.core import SequentialSampler
    >>> rank_slice(SequentialSampler(8, 4), environ={"RANK": "1", "WORLD_SIZE": "2"})
    RankSlice(SequentialSampler(n=8, batch_size=4, drop_last=True), rank=1, world_size=2)
    """
    info = resolve_rank(rank, world_size, environ=environ)
    return RankSlice(sampler, info.rank, info.world_size)


__all__ = ("RankInfo", "rank_slice", "resolve_rank")
