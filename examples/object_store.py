"""Object storage through obstore: any store (S3, GCS, Azure, HTTP, local, memory).

This example uses obstore's in-memory store so it runs anywhere. For S3 or an
S3-compatible server, build the store with obstore and pass it the same way::

    from obstore.store import S3Store
    store = S3Store("my-bucket", region="us-east-1", retry_config={"max_retries": 0})
"""

from __future__ import annotations

import anyio
import numpy as np
from obstore.store import MemoryStore

from aioloader import DataLoader, ObjectStore, RetryPolicy, ShuffledSampler
from aioloader.testing import StackCollator


def decode(data: bytes, index: int) -> np.ndarray:
    return np.frombuffer(data, dtype=np.float32)


async def main() -> None:
    store = MemoryStore()
    for i in range(256):
        store.put(f"samples/{i:05d}.bin", np.full(16, i, np.float32).tobytes())
    source = ObjectStore(
        store,
        prefix="samples/",  # listed once and sorted: indices are stable
        decode=decode,
        max_concurrency=64,  # requests in flight
        timeout=10.0,  # per request
        retries=RetryPolicy(),  # exponential backoff with jitter for transient failures
    )
    loader = DataLoader(source, ShuffledSampler(len(source), 32), StackCollator(), seed=3)
    async with loader.stream(0, 8) as batches:
        async for batch in batches:
            assert np.array_equal(batch.data[:, 0], batch.indices.astype(np.float32))
    print("8 batches read;", source.statistics())


if __name__ == "__main__":
    anyio.run(main)
