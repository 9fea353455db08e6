"""Plain synchronous code: `for batch in loader`, the same batches as `async for`."""

from __future__ import annotations

import numpy as np

from aioloader import DataLoader, SequentialSampler
from aioloader.testing import MemoryDataset, StackCollator


class SquaresDataset:
    """A synchronous dataset: its reads run in worker threads, never on the event loop."""

    def __len__(self) -> int:
        return 100

    def __getitem__(self, index: int) -> np.ndarray:
        return np.array([index, index * index], dtype=np.int64)


def main() -> None:
    loader = DataLoader(SquaresDataset(), SequentialSampler(100, 25), StackCollator(), seed=0)
    for epoch in range(2):
        for batch in loader:
            print(epoch, batch.global_step, batch.data[:2].tolist())
    assert loader.next_step == 8
    memory = DataLoader(
        MemoryDataset([1, 2, 3, 4]), SequentialSampler(4, 2), StackCollator(), seed=0
    )
    print([b.data.tolist() for b in memory.iter_sync(0, 4)])


if __name__ == "__main__":
    main()
