"""A loader over a sampler of the user's own, saved in one process and resumed in another.

Usage: python state_child.py save STATE_FILE | python state_child.py load STATE_FILE

``save`` takes three batches and writes ``loader.state_dict()`` as JSON; ``load`` resumes
from it and prints the next batch's step and indices as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from aioloader import DataLoader
from aioloader.testing import MemoryDataset, StackCollator


class EveryOther:
    """Even indices first, then odd ones: a sampler with the default (address) repr."""

    def __init__(self, n: int, batch_size: int) -> None:
        self.n, self.batch_size = n, batch_size

    @property
    def steps_per_epoch(self) -> int:
        return self.n // self.batch_size

    def indices(self, seed: int, epoch: int, step: int) -> Any:
        order = np.concatenate([np.arange(0, self.n, 2), np.arange(1, self.n, 2)])
        return order[step * self.batch_size : (step + 1) * self.batch_size].astype(np.int64)

    def fingerprint_fields(self) -> dict[str, Any]:
        return {"n": self.n, "batch_size": self.batch_size}


def make_loader() -> DataLoader[Any, Any]:
    return DataLoader(MemoryDataset(list(range(12))), EveryOther(12, 3), StackCollator(), seed=5)


async def take_three(loader: DataLoader[Any, Any]) -> None:
    async for batch in loader:
        if batch.global_step == 2:
            break


async def next_batch(loader: DataLoader[Any, Any]) -> list[Any]:
    async for batch in loader:
        return [batch.global_step, batch.indices.tolist()]
    raise AssertionError("no batch after the resume")


def main(command: str, path: Path) -> None:
    loader = make_loader()
    if command == "save":
        anyio.run(take_three, loader)
        path.write_text(json.dumps(loader.state_dict()))
    else:
        loader.load_state_dict(json.loads(path.read_text()))
        print(json.dumps(anyio.run(next_batch, loader)))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
