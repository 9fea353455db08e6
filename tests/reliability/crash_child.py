"""A training loop that checkpoints {seed, next_step} every K steps (run as a subprocess).

Usage: python crash_child.py STATE_FILE DIGEST_FILE STOP WORKERS EVERY

Resumes from STATE_FILE when it exists. For every batch it appends ``step digest`` to
DIGEST_FILE and prints ``step`` to stdout (so the parent knows where it is), and after
every EVERY steps it saves the loader's state atomically (write, fsync, rename).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from aioloader import DataLoader, GainOffset, ImageBatchCollator, ShuffledSampler
from aioloader.core import digest_batch
from aioloader.datasets import line_images


def main() -> None:
    state_file, digest_file = Path(sys.argv[1]), Path(sys.argv[2])
    stop, workers, every = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    loader = DataLoader(
        line_images(count=96, height=4, min_width=4, max_width=24),
        ShuffledSampler(96, 8),
        ImageBatchCollator(4, augment=GainOffset()),
        seed=99,
        workers=workers,
        prefetch=4,
    )
    if state_file.exists():
        loader.load_state_dict(json.loads(state_file.read_text()))
    with digest_file.open("a") as digests:
        for batch in loader.iter_sync(None, stop):
            with batch:
                step = batch.global_step
                digests.write(f"{step} {digest_batch(batch)}\n")
                digests.flush()
            if (step + 1) % every == 0:
                temporary = state_file.with_suffix(".tmp")
                temporary.write_text(json.dumps(loader.state_dict()))
                with temporary.open("rb") as handle:
                    os.fsync(handle.fileno())
                temporary.replace(state_file)
            print(step, flush=True)


if __name__ == "__main__":
    main()
