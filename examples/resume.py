"""Resume from {seed, step}: the batches after a restart equal an uninterrupted run's."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from aioloader import DataLoader, ShuffledSampler
from aioloader.core import digest_batch
from aioloader.testing import MemoryDataset, StackCollator


def make_loader() -> DataLoader[int, object]:
    return DataLoader(
        MemoryDataset(list(range(1000))), ShuffledSampler(1000, 10), StackCollator(), seed=7
    )


def main() -> None:
    checkpoint = Path(tempfile.mkdtemp()) / "loader.json"
    first = make_loader()
    for _ in first.iter_sync(stop=25):  # "train" 25 steps from the cursor, save, "crash"
        pass
    checkpoint.write_text(json.dumps(first.state_dict()))

    resumed = make_loader()
    resumed.load_state_dict(json.loads(checkpoint.read_text()))
    after_restart = [digest_batch(b) for b in resumed.iter_sync(None, 40)]
    uninterrupted = [digest_batch(b) for b in make_loader().iter_sync(25, 40)]
    assert after_restart == uninterrupted
    print(
        f"resumed at step {json.loads(checkpoint.read_text())['next_step']}: 15 identical batches"
    )


if __name__ == "__main__":
    main()
