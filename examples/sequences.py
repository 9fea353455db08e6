"""Token sequences: padding in arrival order, bucketing, and packing into fixed rows."""

from __future__ import annotations

import anyio
import numpy as np

from aioloader import (
    BucketedSampler,
    DataLoader,
    PackCollator,
    PackedSampler,
    PadCollator,
    ShuffledSampler,
)
from aioloader.core import padding_report
from aioloader.testing import MemoryDataset

LENGTHS = [5, 23, 9, 31, 14, 7, 18, 4, 27, 11, 16, 8]


async def main() -> None:
    for strategy in ("arrival", "bucketed", "packed"):
        report = padding_report(
            LENGTHS, 4, strategy, context_length=32 if strategy == "packed" else None
        )
        real, total = report.real_tokens, report.total_slots
        print(f"{strategy:9} {real} real of {total}: {report.efficiency:.1%}")

    generator = np.random.default_rng(0)
    lengths = np.minimum(generator.lognormal(np.log(200), 0.8, 5000).astype(np.int64) + 1, 2048)
    documents = MemoryDataset([np.arange(n, dtype=np.int32) for n in lengths.tolist()])

    padded = DataLoader(documents, ShuffledSampler(5000, 32), PadCollator(), seed=1)
    bucketed = DataLoader(documents, BucketedSampler(lengths, 32, 50), PadCollator(), seed=1)
    packed_sampler = PackedSampler(lengths, 2048, rows_per_batch=8)
    packed = DataLoader(
        documents, packed_sampler, PackCollator(2048, sampler=packed_sampler), seed=1
    )
    for name, loader in (("padded", padded), ("bucketed", bucketed), ("packed", packed)):
        real = total = 0
        async with loader.stream(0, 20) as batches:
            async for batch in batches:
                with batch:
                    real += (
                        int(batch.lengths.sum())
                        if name != "packed"
                        else int((batch.segment_ids >= 0).sum())
                    )
                    total += batch.tokens.size
        print(f"{name:9} {real / total:.1%} of computed positions are real tokens")


if __name__ == "__main__":
    anyio.run(main)
