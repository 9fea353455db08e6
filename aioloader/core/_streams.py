"""The one registry of rng stream ids: the last argument of ``derive``.

Every random draw of aioloader comes from ``derive(seed, epoch, step, slot, stream)``; two
uses of randomness that share a stream id (and the same other arguments) draw the same
numbers. Each use therefore owns one id, listed here and in docs/contract.md ("Rng
streams"). The values are part of the batch contract: changing one changes every batch
that draws from it.

Ids 3 to 100 are never used by aioloader: they are free for users' own transforms and
augmentations.

>>> int(RngStream.SHUFFLE)
101
"""

from __future__ import annotations

import enum

__all__ = ("RngStream",)


class RngStream(enum.IntEnum):
    """Stream ids of aioloader's draws (see docs/contract.md, "Rng streams")."""

    TRANSFORM = 0
    """The loader transform: ``transform(sample, SampleRng(derive(seed, e, s, slot, 0)))``."""
    AUGMENT = 1
    """The collator's augmentation of each slot (``ImageBatchCollator(augment=...)``)."""
    PACK = 2
    """``PackedSampler``: document order (step argument 0) and row placement (step 1)."""
    SHUFFLE = 101
    """The epoch permutation of ``ShuffledSampler`` and ``DistributedSampler(shuffle=True)``."""
    MIXING = 102
    """``MixingSampler``: the source and item of every slot."""
    BUCKET_ORDER = 103
    """``BucketedSampler``: the keyed shuffle of the epoch before pools are sorted."""
    BUCKET_PLACE = 104
    """``BucketedSampler``: the step at which each sorted batch is served."""
    BLOCK_SHARD_ORDER = 105
    """The block-shuffled sampler: the order of the shards in an epoch."""
    BLOCK_ITEM_ORDER = 106
    """The block-shuffled sampler: the order of the items within one block of shards."""
    WEIGHTED = 107
    """``WeightedRandomSampler``: every slot's draw, or every item's key without replacement."""
    RETRY_JITTER = 201
    """``RetryPolicy``: the random part of the wait between two attempts of a read."""
    SHUFFLE_BUFFER = 202
    """``Stream.shuffle``: the picks from the shuffle buffer."""
    REPLACE_SAMPLE = 203
    """``DataLoader(on_error="skip")``: the index that replaces a sample that failed."""
