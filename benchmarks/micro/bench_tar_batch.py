"""Matching a batch's samples to its coalesced ranges (TarShards without a cache), per batch.

``TarShards.read_samples`` reads a batch with coalesced ranges, then finds, for each sample,
the range holding it. A global shuffle over many shards gives about one range per sample,
so a scan of the ranges per sample costs ``n**2 / 2`` steps; ``RangeFinder`` (a binary
search per sample) costs ``n log n``. Rows: the matching alone, both ways, for batches of
512, 2,048 and 8,192 of a global shuffle over 1,024 local shards, and the whole
``read_samples`` at each batch. ``coalesce_gap=0`` gives each sample its own range, as a
global shuffle of samples of 100 KB and more does with the default gap.
"""

import io
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import numpy as np

from aioloader.sources._tar import RangeFinder, TarShards
from aioloader.sources.cache import ByteRange, coalesce

from ._common import options, spread

BATCHES = (512, 2048, 8192)
T = TypeVar("T")


def scan_each(spans: Sequence[ByteRange], ranges: Sequence[ByteRange]) -> list[int]:
    """The matching ``read_samples`` did before: every range scanned for every sample."""
    found = []
    for key, start, end in spans:
        for position, (range_key, range_start, range_end) in enumerate(ranges):
            if range_key == key and range_start <= start and end <= range_end:
                found.append(position)
                break
    return found


def bisect_each(spans: Sequence[ByteRange], ranges: Sequence[ByteRange]) -> list[int]:
    """The matching ``read_samples`` does now: one binary search per sample."""
    finder = RangeFinder(ranges)
    return [finder.find(key, start) for key, start, _ in spans]


def _write_shards(root: Path, shards: int, per_shard: int) -> list[Path]:
    paths = []
    for s in range(shards):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
            for i in range(per_shard):
                info = tarfile.TarInfo(f"{s * per_shard + i:07d}.bin")
                info.size = 64
                archive.addfile(info, io.BytesIO(bytes(64)))
        paths.append(root / f"shard-{s:04d}.tar")
        paths[-1].write_bytes(buffer.getvalue())
    return paths


def _timed(fn: Callable[..., T], *args: Any) -> tuple[float, T]:
    started = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - started, result


if __name__ == "__main__":
    args = options(__doc__, shards=1024, per_shard=64, rounds=3)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        paths = _write_shards(Path(folder), args.shards, args.per_shard)
        source = TarShards(paths, coalesce_gap=0)
        total = len(source)
        print(f"{args.shards} shards, {total} samples, global shuffle; seconds: median | min | max")
        for batch in BATCHES:
            indices = rng.permutation(total)[:batch].tolist()
            spans = [source.span_of(i) for i in indices]
            ranges = coalesce(spans, source.coalesce_gap, source.max_request_bytes)
            rows: dict[str, list[float]] = {"scan (before)": [], "bisect (now)": []}
            for _ in range(args.rounds):
                before, want = _timed(scan_each, spans, ranges)
                now, got = _timed(bisect_each, spans, ranges)
                assert got == want
                rows["scan (before)"].append(before)
                rows["bisect (now)"].append(now)
            reads = []
            for _ in range(args.rounds):
                started = time.perf_counter()
                anyio.run(source.read_samples, indices)
                reads.append(time.perf_counter() - started)
            print(f"batch {batch:5d}: {len(ranges)} ranges")
            for row, values in rows.items():
                print(f"  match, {row:14s} {spread(values, '.4f')}")
            print(f"  read_samples (now)     {spread(reads, '.4f')}")
