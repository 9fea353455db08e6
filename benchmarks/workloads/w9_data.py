"""W9's data: generated JPEG files on a local disk, and the per-sample work on one of them.

The files are W5's photo-like pictures (``w5_jpeg._picture``), one generator per file seeded
by ``(SEED, index)`` so that worker processes can write them in any order and still give the
same bytes. ``load_sample`` opens a file, reads it and runs W5J's GIL-free chain (simplejpeg
decode, random crop 300-360, bilinear 224x224, flip) with the loader's per-sample rng.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import numpy as np

from aioloader import takes_rng
from aioloader.core import SampleRng
from workloads.w5_jpeg import _picture
from workloads.w5j_chain import CHAIN

SEED = 9
DONE = "w9-done.json"  # written last: a folder holding it holds every file it names


@dataclasses.dataclass(frozen=True)
class Files:
    """``count`` JPEGs of ``width`` x ``height`` at JPEG ``quality``."""

    count: int
    height: int = 375
    width: int = 500
    quality: int = 90


def _write_one(folder: str, index: int, files: Files) -> int:
    """Write file ``index``; returns its size in bytes."""
    generator = np.random.default_rng([SEED, index])
    path = Path(folder) / f"{index:05d}.jpg"
    _picture(generator, files.height, files.width).save(path, "JPEG", quality=files.quality)
    return path.stat().st_size


def write_jpegs(folder: Path, files: Files, processes: int = 1) -> list[Path]:
    """The files in ``folder``, written unless already there (by ``processes`` spawned
    processes when there are many)."""
    paths = [folder / f"{index:05d}.jpg" for index in range(files.count)]
    done = folder / DONE
    wanted = dataclasses.asdict(files)
    if done.is_file() and json.loads(done.read_text()) == wanted:
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    if processes > 1 and files.count >= 256:  # spawned: no fork of a threaded process
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(processes, mp_context=context) as pool:
            list(
                pool.map(
                    _write_one,
                    [os.fspath(folder)] * files.count,
                    range(files.count),
                    [files] * files.count,
                    chunksize=32,
                )
            )
    else:
        for index in range(files.count):
            _write_one(os.fspath(folder), index, files)
    done.write_text(json.dumps(wanted))
    return paths


def items(paths: list[Path]) -> list[tuple[str, int]]:
    """The dataset: ``(path, label)`` per file, ten labels."""
    return [(os.fspath(path), index % 10) for index, path in enumerate(paths)]


@takes_rng
def load_sample(item: tuple[str, int], rng: SampleRng) -> dict[str, Any]:
    """Open the file, read it, run the chain: ``{"images": uint8 [224, 224, 3], "labels"}``."""
    path, label = item
    with open(path, "rb") as file:
        data = file.read()
    return {"images": CHAIN(data, rng), "labels": label}


def mean_kilobytes(paths: list[Path]) -> float:
    """The files' mean size in KB."""
    return sum(path.stat().st_size for path in paths) / len(paths) / 1e3
