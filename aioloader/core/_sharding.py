"""Sharding a sampler across data-parallel ranks (pure: numpy only).

Two ways to split an epoch between ``world_size`` processes:

- ``RankSlice`` (global-batch sharding): the global batch of every step is the inner
  sampler's, and rank ``r`` reads the contiguous ``r``-th of ``world_size`` equal parts.
  The global stream does not depend on the number of ranks, so a checkpoint
  ``{seed, next_step}`` taken on 8 ranks resumes on 4 or 16 with the same global batches.
- ``DistributedSampler``: the index layout of ``torch.utils.data.DistributedSampler``
  (pad or cut the epoch to a multiple of ``world_size``, rank ``r`` takes every
  ``world_size``-th index from ``r``), then cut into per-rank batches. Compatible with
  existing torch pipelines, but the stream depends on ``world_size``.

In both, every rank has the same ``steps_per_epoch`` and the same batch size at each step,
so collectives (gradient all-reduce) never wait on a rank that ran out of data.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from ._check import as_int, batch_size_arg, flag, positive_int
from ._permutation import keyed_permutation_array
from ._rng import _derive_unchecked
from ._samplers import (
    INDEX_LIMIT,
    BucketedSampler,
    IndexArray,
    MixingSampler,
    Sampler,
    _check_position,
    _FixedBatches,
    _PositionalSampler,
    batches_in,
    check_sampler,
)
from ._streams import RngStream


def _check_rank(rank: Any, world_size: Any) -> tuple[int, int]:
    world = positive_int("world_size", world_size)
    number = as_int("rank", rank)
    if not 0 <= number < world:
        raise ValueError(
            f"rank must be an integer in [0, world_size) = [0, {world}) but got {number}"
        )
    return number, world


def _split(total: int, batch_size: int, drop_last: bool) -> frozenset[int]:
    """Sizes of the batches when ``total`` items are cut into batches of ``batch_size``."""
    full, rest = divmod(total, batch_size)
    sizes = {batch_size} if full else set()
    if rest and not drop_last:
        sizes.add(rest)
    return frozenset(sizes)


def batch_sizes_of(sampler: Sampler) -> frozenset[int] | None:
    """Every batch size ``sampler.indices`` can return, or None when it cannot be known.

    A sampler may declare them with a ``batch_sizes`` attribute (a set of ints); the
    samplers of ``aioloader.core`` are known without one.
    """
    declared = getattr(sampler, "batch_sizes", None)
    if declared is not None:
        return frozenset(int(size) for size in declared)
    if isinstance(sampler, _PositionalSampler):
        return _split(sampler.n, sampler.batch_size, sampler.drop_last)
    if isinstance(sampler, MixingSampler):
        return frozenset({sampler.batch_size})
    if isinstance(sampler, BucketedSampler):
        return _split(int(sampler.lengths.shape[0]), sampler.batch_size, sampler.drop_last)
    return None


def _indivisible_message(size: int, world_size: int, sampler: Sampler) -> str:
    return (
        f"global batch size must be divisible by world_size = {world_size} but {sampler!r} "
        f"gives a batch of {size} (use a batch size that is a multiple of world_size, "
        "and drop_last=True or n divisible by batch_size)"
    )


class _OneRank:
    """Rank ``rank`` of ``world_size`` ranks: what each sharding sampler is for.

    Holds no slots of its own: a subclass lists ``_rank`` and ``_world_size`` in its
    ``__slots__`` and sets them from ``_check_rank``, so that it may also derive from a
    base that has slots (``DistributedSampler`` does).
    """

    __slots__ = ()
    _rank: int
    _world_size: int

    @property
    def rank(self) -> int:
        """This process's rank, in ``[0, world_size)``."""
        return self._rank

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return self._world_size


class RankSlice(_OneRank):
    """Rank ``rank``'s contiguous share of every global batch of ``sampler``.

    At each step rank ``r`` of ``R`` receives entries ``[r*b/R, (r+1)*b/R)`` of the global
    batch of ``b`` indices. ``steps_per_epoch`` is the inner sampler's, so all ranks agree
    on the number of steps; the global stream is independent of ``R`` (elastic resume).
    Every batch size the inner sampler can produce must be divisible by ``R``.
    ``global_slots`` gives where this rank's entries sit in the global batch, so that
    per-slot random keys (transform, augmentation) can be the global batch's.

    >>> from aioloader.core import SequentialSampler
    >>> [RankSlice(SequentialSampler(12, 4), r, 2).indices(0, 0, 1).tolist() for r in (0, 1)]
    [[4, 5], [6, 7]]
    """

    __slots__ = ("_batch_sizes", "_rank", "_sampler", "_world_size")

    def __init__(self, sampler: Sampler, rank: int, world_size: int) -> None:
        check_sampler(sampler, needs_a_step=False)
        self._rank, self._world_size = _check_rank(rank, world_size)
        self._sampler = sampler
        sizes = batch_sizes_of(sampler)
        if sizes is not None:
            for size in sorted(sizes):
                if size % self._world_size:
                    raise ValueError(_indivisible_message(size, self._world_size, sampler))
            sizes = frozenset(size // self._world_size for size in sizes)
        self._batch_sizes = sizes

    @property
    def sampler(self) -> Sampler:
        """The global sampler whose batches are sliced."""
        return self._sampler

    @property
    def steps_per_epoch(self) -> int:
        """The inner sampler's: the same on every rank."""
        return int(self._sampler.steps_per_epoch)

    @property
    def batch_sizes(self) -> frozenset[int] | None:
        """Every per-rank batch size, or None when the inner sampler does not say."""
        return self._batch_sizes

    def slot_range(self, size: int) -> tuple[int, int]:
        """Where this rank's part lies in a global batch of ``size`` indices."""
        share, rest = divmod(as_int("size", size), self._world_size)
        if rest:
            raise ValueError(_indivisible_message(size, self._world_size, self._sampler))
        return self._rank * share, (self._rank + 1) * share

    def global_slots(self, seed: int, epoch: int, step: int) -> IndexArray:
        """Positions of this rank's indices within the global batch of ``(epoch, step)``."""
        sizes = self._batch_sizes
        if sizes is not None and len(sizes) == 1:  # known without computing the batch
            _check_position(seed, epoch, step, self.steps_per_epoch)
            size = next(iter(sizes)) * self._world_size
        else:
            size = int(self._sampler.indices(seed, epoch, step).shape[0])
        start, stop = self.slot_range(size)
        return np.arange(start, stop, dtype=np.int64)

    def indices(self, seed: int, epoch: int, step: int) -> IndexArray:
        """This rank's contiguous slice of the global batch of ``(epoch, step)``."""
        whole = self._sampler.indices(seed, epoch, step)
        start, stop = self.slot_range(int(whole.shape[0]))
        return np.array(whole[start:stop], dtype=np.int64)

    def __repr__(self) -> str:
        return f"RankSlice({self._sampler!r}, rank={self._rank}, world_size={self._world_size})"


class DistributedSampler(_FixedBatches, _OneRank):
    """The index layout of ``torch.utils.data.DistributedSampler``, cut into batches.

    The epoch's order is ``0 .. n-1``, or with ``shuffle=True`` aioloader's keyed
    permutation ``perm(p, n, derive(seed, epoch, 0, 0, 101))`` (the order of
    ``ShuffledSampler``; not torch's ``randperm`` order). Without ``drop_last`` the order
    is padded by repeating its head until its length divides by ``world_size``; with it,
    the tail is cut. Rank ``r`` takes every ``world_size``-th entry from ``r``: its
    ``num_samples`` indices equal torch's ``list(DistributedSampler(...))`` with
    ``shuffle=False``. These are then cut into batches of ``batch_size``; the last batch
    holds the remainder unless ``drop_last_batch`` (like ``DataLoader(drop_last=...)``).
    Every rank has the same number of steps and the same batch size at each step.

    >>> [DistributedSampler(10, 3, r, 4).indices(0, 0, 0).tolist() for r in range(4)]
    [[0, 4, 8], [1, 5, 9], [2, 6, 0], [3, 7, 1]]
    """

    __slots__ = (
        "_drop_last",
        "_drop_last_batch",
        "_n",
        "_num_samples",
        "_rank",
        "_shuffle",
        "_world_size",
    )

    def __init__(
        self,
        n: int,
        batch_size: int,
        rank: int,
        world_size: int,
        shuffle: bool = False,
        drop_last: bool = False,
        *,
        drop_last_batch: bool = False,
    ) -> None:
        self._n = positive_int("n", n, INDEX_LIMIT)
        self._batch_size = batch_size_arg(batch_size)
        self._rank, self._world_size = _check_rank(rank, world_size)
        self._shuffle = flag("shuffle", shuffle)
        self._drop_last = flag("drop_last", drop_last)
        self._drop_last_batch = flag("drop_last_batch", drop_last_batch)
        if drop_last:
            self._num_samples = self._n // self._world_size
        else:
            self._num_samples = -(-self._n // self._world_size)
        self._steps = batches_in(self._num_samples, self._batch_size, drop_last_batch)

    @property
    def n(self) -> int:
        """Number of items in the dataset."""
        return self._n

    @property
    def shuffle(self) -> bool:
        """Whether each epoch is a keyed permutation (else ``0 .. n-1``)."""
        return self._shuffle

    @property
    def drop_last(self) -> bool:
        """Whether the epoch is cut (not padded) to a multiple of ``world_size``."""
        return self._drop_last

    @property
    def drop_last_batch(self) -> bool:
        """Whether a rank's short last batch is dropped."""
        return self._drop_last_batch

    @property
    def num_samples(self) -> int:
        """Indices per rank per epoch (torch's ``num_samples``)."""
        return self._num_samples

    @property
    def total_size(self) -> int:
        """Indices per epoch over all ranks, after padding or cutting."""
        return self._num_samples * self._world_size

    @property
    def batch_sizes(self) -> frozenset[int]:
        """Every batch size ``indices`` can return."""
        return _split(self._num_samples, self._batch_size, self._drop_last_batch)

    def epoch_indices(self, seed: int, epoch: int) -> IndexArray:
        """This rank's indices of one epoch, in order.

        All ``num_samples`` of them, less a short last batch when ``drop_last_batch``.
        """
        parts = [self.indices(seed, epoch, step) for step in range(self._steps)]
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return cast(IndexArray, np.concatenate(parts))

    def indices(self, seed: int, epoch: int, step: int) -> IndexArray:
        """This rank's indices of ``(epoch, step)``."""
        seed_value, epoch_value, step_value = _check_position(seed, epoch, step, self._steps)
        start = step_value * self._batch_size
        stop = min(start + self._batch_size, self._num_samples)
        # Position in the padded (or cut) epoch list, then back into [0, n): padding
        # repeats the list from its head, so padded position p holds entry p mod n.
        # uint64: below n + world_size < 2^64, so no wrap.
        local = np.arange(start, stop, dtype=np.uint64)
        positions = local * np.uint64(self._world_size) + np.uint64(self._rank)
        positions %= np.uint64(self._n)
        if not self._shuffle:
            result: IndexArray = positions.astype(np.int64)
            return result
        key = _derive_unchecked(seed_value, epoch_value, 0, 0, RngStream.SHUFFLE)
        return keyed_permutation_array(positions, self._n, key).astype(np.int64)

    def fingerprint_fields(self) -> dict[str, Any]:
        """What decides this rank's stream, for the checkpoint's fingerprint (JSON data)."""
        return {
            "n": self._n,
            "batch_size": self._batch_size,
            "rank": self._rank,
            "world_size": self._world_size,
            "shuffle": self._shuffle,
            "drop_last": self._drop_last,
            "drop_last_batch": self._drop_last_batch,
        }

    def __repr__(self) -> str:
        return (
            f"DistributedSampler(n={self._n}, batch_size={self._batch_size}, rank={self._rank}, "
            f"world_size={self._world_size}, shuffle={self._shuffle}, "
            f"drop_last={self._drop_last}, drop_last_batch={self._drop_last_batch})"
        )


__all__ = ("DistributedSampler", "RankSlice", "batch_sizes_of")
