"""Transforms, collators and checks for the worker-process tests.

They live at module level in a module without pytest so that worker processes can import
them (a spawned worker unpickles them by name).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from aioloader import takes_plan, takes_rng
from aioloader._compat import add_note
from aioloader.core import BatchPlan, ImageSample, SampleRng

SPAWN_MARKER = b"multiprocessing.spawn"


def image_samples(n: int) -> list[ImageSample]:
    """Planar float32 images of varying width, with targets and labels."""
    out = []
    for i in range(n):
        rng = np.random.default_rng(i)
        image = rng.random((3, 4, 3 + i % 5), dtype=np.float32)
        out.append(ImageSample(image, np.arange(i % 3, dtype=np.int32), i))
    return out


@takes_rng
def brighten(sample: ImageSample, rng: SampleRng) -> ImageSample:
    """Scales the image by a draw of the sample's rng (stream 0)."""
    return ImageSample(sample.image * np.float32(rng.next_single()), sample.target, sample.label)


def sequences(n: int) -> list[npt.NDArray[np.int64]]:
    """Token sequences of lengths 1..7."""
    return [np.arange(1 + i % 7, dtype=np.int64) + 100 * i for i in range(n)]


@takes_rng
def shift(sample: npt.NDArray[np.int64], rng: SampleRng) -> npt.NDArray[np.int64]:
    """Adds a draw of the sample's rng."""
    return sample + rng.next_int(1000)


@takes_plan
def dict_collator(samples: Sequence[Any], plan: BatchPlan) -> dict[str, Any]:
    """A user collator returning a dict of arrays, a scalar and a nested tuple."""
    stacked = np.stack([np.asarray(s, np.float64) for s in samples])
    return {
        "x": stacked,
        "total": stacked.sum(axis=1).astype(np.float32),
        "step": plan.global_step,
        "meta": (plan.indices.copy(), "tag"),
    }


def rows(n: int, width: int = 8) -> list[npt.NDArray[np.float64]]:
    """Distinct float64 rows."""
    return [np.arange(width, dtype=np.float64) + i for i in range(n)]


@dataclass(frozen=True)
@takes_rng
class Crash:
    """A transform that fails on dataset value ``at`` (the first element of the sample).

    ``how``: ``"raise"`` (ValueError), ``"exit"`` (``os._exit(3)``) or ``"kill"``
    (SIGKILL to its own process).
    """

    how: str
    at: float

    def __call__(self, sample: npt.NDArray[np.float64], rng: SampleRng) -> Any:
        if float(sample[0]) == self.at:
            if self.how == "raise":
                raise ValueError(f"bad sample {self.at}")
            if self.how == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)
        return sample


@takes_rng
def wait_for_fifo(sample: Any, rng: SampleRng) -> Any:
    """Blocks until something is written to the FIFO named by ``sample[1]``."""
    value, fifo = sample
    with open(fifo, "rb") as pipe:
        pipe.read(1)
    return np.full(1, value, np.float64)


def spawned_children() -> set[int]:
    """Pids of live children of this process started by multiprocessing's spawn."""
    me = os.getpid()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == me and SPAWN_MARKER in cmdline and b"spawn_main" in cmdline:
            found.add(int(entry.name))
    return found


def shm_entries(prefix: str = "aioloader") -> list[str]:
    """Names under /dev/shm that start with ``prefix``."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        return []
    return sorted(p.name for p in shm.iterdir() if p.name.startswith(prefix))


@takes_rng
class BrokenInWorker:
    """Pickles fine, but fails to unpickle (as a module missing in the worker would)."""

    def __call__(self, sample: Any, rng: SampleRng) -> Any:
        return sample

    def __reduce__(self) -> tuple[Any, ...]:
        return (_refuse, ())


def _refuse() -> None:
    raise ImportError("no module named 'only_in_the_parent'")


class Opaque:
    """A value that does not pickle."""

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError("Opaque objects do not pickle")


@takes_plan
def opaque_collator(samples: Sequence[Any], plan: BatchPlan) -> dict[str, Any]:
    """Returns a batch that cannot leave the worker."""
    return {"x": np.stack(samples), "handle": Opaque()}


class CountedRows:
    """A sync dataset of ``rows(n)`` that counts the reads made in this process's copy."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.rows = rows(n)
        self.fail_at = fail_at
        self.reads = 0

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> npt.NDArray[np.float64]:
        self.reads += 1
        if index == self.fail_at:
            raise KeyError(f"no row {index}")
        return self.rows[index]


BAD_INDICES = frozenset({3, 17})
"""The indices whose sample the bad-sample tests cannot read or transform."""


def index_rows(n: int) -> list[npt.NDArray[np.float64]]:
    """Sample i is the row ``[i]``: a batch shows which indices it holds."""
    return [np.array([float(i)]) for i in range(n)]


def refuse_bad_rows(sample: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """A one-parameter transform that raises on the rows of ``BAD_INDICES``."""
    if int(sample[0]) in BAD_INDICES:
        raise ValueError(f"cannot transform row {int(sample[0])}")
    return sample


def stack_rows(samples: Sequence[npt.NDArray[np.float64]]) -> npt.NDArray[np.float64]:
    """A torch-style one-argument collator: the rows stacked into a column."""
    return np.concatenate(list(samples))


N_ROWS = 40
"""The length of ``SyncRows``."""


class SyncRows:
    """A sync dataset of ``N_ROWS`` rows whose ``BAD_INDICES`` raise OSError with a path."""

    def __len__(self) -> int:
        return N_ROWS

    def __getitem__(self, index: int) -> npt.NDArray[np.float64]:
        if index in BAD_INDICES:
            error = OSError(f"cannot read sample {index}")
            add_note(error, f"path: /data/{index}.bin")
            raise error
        return np.array([float(index)])
