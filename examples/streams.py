"""Streams of unknown length: map with bounded concurrency, shuffle, batch, shard."""

from __future__ import annotations

import anyio

from aioloader import Stream


async def fetch(url: str) -> str:
    await anyio.sleep(0.001)  # stands for a network read
    return url.upper()


async def main() -> None:
    urls = [f"https://example.invalid/{i}" for i in range(100)]
    for rank in range(2):
        pipeline = (
            Stream(urls)
            .shard(rank, 2)  # each rank reads every 2nd item: nothing is read twice
            .map(fetch, concurrency=16)  # ordered output: same input order, same batches
            .shuffle(buffer_size=20, seed=7)
            .batch(8)
            .prefetch(2)
        )
        async with pipeline.open() as batches:
            sizes = [len(batch) async for batch in batches]
        print(f"rank {rank}: {len(sizes)} batches, {sum(sizes)} items")


if __name__ == "__main__":
    anyio.run(main)
