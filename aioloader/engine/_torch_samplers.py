"""The samplers of the torch form: torch's ``shuffle``, ``sampler`` and ``batch_sampler`` as
aioloader samplers (index-addressable, so every batch is a pure function of ``(seed, g)``).

torch's own samplers are recognised by their exact type (never imported: the engine does not
import torch); a subclass, or any other iterable of indices, cannot be replayed by step and is
refused with the way out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core import (
    DistributedSampler,
    IndexArray,
    Sampler,
    SequentialSampler,
    ShuffledSampler,
    WeightedRandomSampler,
    as_int,
    batches_in,
)

FROM_TORCH = "docs/from-torch.md"
TORCH_SAMPLERS = (
    "SequentialSampler",
    "RandomSampler",
    "DistributedSampler",
    "WeightedRandomSampler",
)


class EmptySampler:
    """An epoch of no steps: torch's loader over an empty dataset, or over fewer items than
    one batch with ``drop_last``. Iterating serves nothing.

    >>> EmptySampler(2, 3, True).steps_per_epoch
    0
    """

    __slots__ = ("_batch_size", "_drop_last", "_n")

    def __init__(self, n: int, batch_size: int, drop_last: bool) -> None:
        self._n = n
        self._batch_size = batch_size
        self._drop_last = drop_last

    @property
    def n(self) -> int:
        """Items in the dataset (fewer than one batch, or none)."""
        return self._n

    @property
    def steps_per_epoch(self) -> int:
        """Always 0."""
        return 0

    def indices(self, seed: int, epoch: int, step: int) -> IndexArray:
        """Never a batch: an epoch of this sampler has no step."""
        raise ValueError(
            f"step must be in [0, steps_per_epoch) but steps_per_epoch is 0 ({self!r})"
        )

    def fingerprint_fields(self) -> dict[str, Any]:
        """What decides the stream, for the checkpoint's fingerprint (JSON data)."""
        return {"n": self._n, "batch_size": self._batch_size, "drop_last": self._drop_last}

    def __repr__(self) -> str:
        return (
            f"EmptySampler(n={self._n}, batch_size={self._batch_size}, drop_last={self._drop_last})"
        )


@dataclass(frozen=True, slots=True)
class Translated:
    """An aioloader sampler for torch's arguments, and what else they carried.

    Attributes:
        sampler: the aioloader sampler.
        seed: the seed the torch sampler carried (its generator's, a ``DistributedSampler``'s
            ``seed``), or None.
        epochs: a torch ``DistributedSampler`` whose ``set_epoch`` the loader follows, or None.
    """

    sampler: Sampler
    seed: int | None = None
    epochs: Any = None


def torch_kind(sampler: Any) -> str | None:
    """The name of torch's sampler class ``sampler`` is exactly an instance of, else None."""
    kind = type(sampler)
    if kind.__module__.startswith("torch.utils.data"):
        return kind.__name__
    return None


def is_aioloader_sampler(sampler: Any) -> bool:
    """Whether ``sampler`` addresses batches by step (``indices(seed, epoch, step)``)."""
    return callable(getattr(sampler, "indices", None)) and hasattr(sampler, "steps_per_epoch")


def positional(n: int, batch_size: int, shuffle: bool, drop_last: bool) -> Sampler:
    """torch's ``SequentialSampler`` or ``RandomSampler`` batched: aioloader's Sequential or
    Shuffled sampler (the same multiset of items per epoch), or an ``EmptySampler``."""
    if batches_in(n, batch_size, drop_last) == 0:
        return EmptySampler(n, batch_size, drop_last)
    kind = ShuffledSampler if shuffle else SequentialSampler
    return kind(n, batch_size, drop_last)


def _generator_seed(generator: Any) -> int | None:
    if generator is None:
        return None
    initial_seed = getattr(generator, "initial_seed", None)
    if not callable(initial_seed):
        raise TypeError(
            f"generator must be a torch.Generator (with initial_seed()) or None but got "
            f"{type(generator).__name__}"
        )
    return int(initial_seed())


def _check_source(name: str, sampler: Any, source: Any, n: int) -> None:
    try:
        length = len(source)
    except TypeError:
        length = None
    if length != n:
        raise ValueError(
            f"{name}'s dataset must have len(dataset) = {n} items but {type(sampler).__name__} "
            f"was built over {length}"
        )


def _refused(name: str, sampler: Any) -> ValueError:
    return ValueError(
        f"{name} must be None or torch's {', '.join(TORCH_SAMPLERS)} (the order of any other "
        f"sampler cannot be replayed by step, which resume needs) but got "
        f"{type(sampler).__name__}; write an aioloader sampler and pass it as batch_sampler= "
        f"(custom batch samplers in {FROM_TORCH})"
    )


def _distributed(sampler: Any, n: int, batch_size: int, drop_last: bool) -> Translated:
    world = as_int("sampler.num_replicas", sampler.num_replicas)
    rank = as_int("sampler.rank", sampler.rank)
    per_rank = (n // world) if sampler.drop_last else -(-n // world)
    if n == 0 or batches_in(per_rank, batch_size, drop_last) == 0:
        empty = EmptySampler(per_rank, batch_size, drop_last)
        return Translated(empty, int(sampler.seed), sampler)
    shard = DistributedSampler(
        n,
        batch_size,
        rank,
        world,
        shuffle=bool(sampler.shuffle),
        drop_last=bool(sampler.drop_last),
        drop_last_batch=drop_last,
    )
    return Translated(shard, int(sampler.seed), sampler)


def index_sampler(
    sampler: Any, n: int, batch_size: int, shuffle: bool, drop_last: bool, generator: Any
) -> Translated:
    """torch's ``sampler=`` (or none, then ``shuffle``) cut into batches of ``batch_size``."""
    seed = _generator_seed(generator)
    if sampler is None:
        return Translated(positional(n, batch_size, shuffle, drop_last), seed)
    kind = torch_kind(sampler)
    if kind == "SequentialSampler":
        _check_source("sampler", sampler, sampler.data_source, n)
        return Translated(positional(n, batch_size, False, drop_last), seed)
    if kind == "RandomSampler":
        _check_source("sampler", sampler, sampler.data_source, n)
        if sampler.replacement or sampler.num_samples != n:
            raise ValueError(
                "sampler=RandomSampler(...) must draw each item once (replacement=False, "
                f"num_samples=None) but got replacement={sampler.replacement}, "
                f"num_samples={sampler.num_samples}; draws with replacement: a weighted "
                f"sampler passed as batch_sampler= ({FROM_TORCH})"
            )
        own = _generator_seed(sampler.generator)
        return Translated(positional(n, batch_size, True, drop_last), seed if own is None else own)
    if kind == "DistributedSampler":
        _check_source("sampler", sampler, sampler.dataset, n)
        return _distributed(sampler, n, batch_size, drop_last)
    if kind == "WeightedRandomSampler":
        weights = [float(weight) for weight in sampler.weights.tolist()]
        draws = as_int("sampler.num_samples", sampler.num_samples)
        if batches_in(draws, batch_size, drop_last) == 0:
            return Translated(EmptySampler(draws, batch_size, drop_last), seed)
        own = _generator_seed(sampler.generator)
        weighted = WeightedRandomSampler(
            weights, draws, batch_size, replacement=bool(sampler.replacement), drop_last=drop_last
        )
        return Translated(weighted, seed if own is None else own)
    raise _refused("sampler", sampler)


def batch_sampler_of(batch_sampler: Any, n: int, generator: Any) -> Translated:
    """torch's ``batch_sampler=``: an aioloader sampler as it is, or torch's ``BatchSampler``
    over one of the samplers ``index_sampler`` knows."""
    if is_aioloader_sampler(batch_sampler):
        return Translated(batch_sampler, _generator_seed(generator))
    if torch_kind(batch_sampler) == "BatchSampler":
        inner = batch_sampler.sampler
        return index_sampler(
            None if torch_kind(inner) == "SequentialSampler" else inner,
            n,
            as_int("batch_sampler.batch_size", batch_sampler.batch_size),
            False,
            bool(batch_sampler.drop_last),
            generator,
        )
    raise ValueError(
        "batch_sampler must be an aioloader sampler (indices(seed, epoch, step)) or torch's "
        f"BatchSampler over {', '.join(TORCH_SAMPLERS)} but got {type(batch_sampler).__name__} "
        f"(custom batch samplers in {FROM_TORCH})"
    )


__all__ = (
    "EmptySampler",
    "Translated",
    "batch_sampler_of",
    "index_sampler",
    "is_aioloader_sampler",
    "positional",
    "torch_kind",
)
