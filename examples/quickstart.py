"""The quickstart: synthetic line images, shuffled, augmented, in an async loop."""

from __future__ import annotations

import anyio

from aioloader import DataLoader, GainOffset, ImageBatchCollator, ShuffledSampler
from aioloader.datasets import line_images


async def main() -> None:
    loader = DataLoader(
        line_images(),  # anything with async get_sample(index) and __len__
        ShuffledSampler(2048, batch_size=128),  # a pure function of (seed, epoch, step)
        ImageBatchCollator(width_multiple=4, augment=GainOffset()),
        seed=42,
        workers=2,
        prefetch=8,
    )
    async with loader.epoch() as batches:  # one epoch from the cursor; its tasks end here
        async for batch in batches:
            with batch:  # the batch's buffers go back to the pool at the end of the block
                print(batch.global_step, batch.images.shape, batch.widths[:4].tolist())
    print("checkpoint:", loader.state_dict())
    print(loader.statistics())


if __name__ == "__main__":
    anyio.run(main)
