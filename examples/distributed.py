"""Data-parallel training: every rank takes its slice of the global batch of each step.

Run one process per rank, e.g. `RANK=1 WORLD_SIZE=4 python distributed.py`; under
torch.distributed the rank and world size come from the initialised process group. The
global batch at step g does not depend on the world size, so a checkpoint taken on 8 ranks
resumes on 4 or 16 with the same global batches (elastic resume).
"""

from __future__ import annotations

from aioloader import DataLoader, ShuffledSampler
from aioloader.interop import rank_slice, resolve_rank
from aioloader.testing import MemoryDataset, StackCollator


def main() -> None:
    ranks = resolve_rank()  # explicit arguments > torch.distributed > RANK/WORLD_SIZE > (0, 1)
    global_sampler = ShuffledSampler(10_000, batch_size=64)
    sampler = rank_slice(global_sampler, ranks.rank, ranks.world_size)
    loader = DataLoader(MemoryDataset(list(range(10_000))), sampler, StackCollator(), seed=1)
    for batch in loader.iter_sync(0, 3):
        print(f"rank {ranks.rank}/{ranks.world_size} step {batch.global_step}: {batch.data[:4]}")


if __name__ == "__main__":
    main()
