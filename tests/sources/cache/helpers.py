"""Shards for the cache tests, a TarShards that logs its reads, and per-epoch counting."""

from __future__ import annotations

import io
import itertools
import tarfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np
import obstore

from aioloader.core import BlockShuffledSampler, ShuffledSampler, plan_batch
from aioloader.sources._tar import TarShards

SHARDS, PER_SHARD, BATCH, SEED = 24, 32, 16, 7
N = SHARDS * PER_SHARD


def shard_blobs(
    shards: int = SHARDS,
    per_shard: int = PER_SHARD,
    *,
    seed: int = 5,
    sizes: tuple[int, int] = (4000, 12000),
) -> list[bytes]:
    """Tar shards of one ``.bin`` member per sample, of ``sizes[0]`` to ``sizes[1]`` bytes
    (ustar: 512-byte headers)."""
    rng = np.random.default_rng(seed)
    blobs = []
    for s in range(shards):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
            for i in range(per_shard):
                data = rng.integers(0, 256, int(rng.integers(*sizes)), np.uint8).tobytes()
                info = tarfile.TarInfo(f"s{s:02d}/x{i:03d}.bin")
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
        blobs.append(buffer.getvalue())
    return blobs


def upload(store: Any, prefix: str, blobs: list[bytes]) -> list[str]:
    keys = []
    for s, blob in enumerate(blobs):
        keys.append(f"{prefix}shard-{s:02d}.tar")
        obstore.put(store, keys[-1], blob)
    return keys


def want_of(blobs: list[bytes]) -> list[bytes]:
    """Every sample's bytes, in dataset order."""
    out = []
    for blob in blobs:
        with tarfile.open(fileobj=io.BytesIO(blob)) as archive:
            for member in archive.getmembers():
                handle = archive.extractfile(member)
                assert handle is not None
                out.append(handle.read())
    return out


def samplers() -> dict[str, Any]:
    return {
        "global": ShuffledSampler(N, BATCH),
        "block": BlockShuffledSampler([PER_SHARD] * SHARDS, BATCH, window=4),
    }


class LoggedShards(TarShards[Any]):
    """``TarShards`` that logs every range it reads: the store's request log."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.log: list[tuple[str, int, int]] = []
        super().__init__(*args, **kwargs)

    async def read_range(self, key: str, start: int, end: int) -> bytes:
        self.log.append((key, start, end))
        return await super().read_range(key, start, end)


@dataclass
class Epochs:
    """What the reads of each epoch fetched, and whether a sample was fetched twice unused."""

    requests: list[int]
    fetched: list[int]
    fetched_twice_unused: int
    fetched_twice_in_an_epoch: int
    batches: list[list[bytes]]
    used: list[int]  # the cache's bytes_used in each epoch (each fetch for a use)
    between: list[int]  # the cache's bytes_between in each epoch (headers, samples held)


def run_epochs(
    source: LoggedShards,
    sampler: Any,
    epochs: int,
    start: int = 0,
    *,
    per_epoch: bool = False,
    backend: str = "asyncio",
) -> Epochs:
    """Read ``epochs`` epochs batch by batch in plan order (plans the cache, as a loader does).

    ``per_epoch`` plans each epoch on its own, as the loader does for ``async for batch in
    loader`` (one stream an epoch); else one plan spans every epoch (one long stream). A
    sample counts as fetched twice unused when two reads carry it with no batch using it
    in between, and as fetched twice in an epoch when two reads of one epoch carry it
    (a run that passes over samples held carries them too: ``between`` counts those).
    Each epoch runs in ``anyio.run`` on ``backend`` (``"asyncio"`` or ``"trio"``).
    """
    steps = sampler.steps_per_epoch
    if source.cache is not None and not per_epoch:
        source.plan_reads(sampler, SEED, start)
    events: dict[int, list[str]] = {}
    twice_in_an_epoch = 0
    requests, fetched, batches, used, between = [], [], [], [], []

    async def epoch(first: int) -> None:
        for g in range(first, first + steps):
            indices = plan_batch(sampler, SEED, g).indices.tolist()
            seen = len(source.log)
            got = await source.get_samples(indices)
            batches.append([sample["bin"] for sample in got])
            for key, begin, end in source.log[seen:]:
                for unit in source.indices_within(key, begin, end):
                    events.setdefault(unit, []).append("fetch")
            for unit in set(indices):
                events.setdefault(unit, []).append("use")

    for e in range(epochs):
        first = start + e * steps
        if source.cache is not None and per_epoch:
            source.plan_reads(sampler, SEED, first, first + steps)
        before = len(source.log)
        counted = _counts(source)
        anyio.run(epoch, first, backend=backend)
        used.append(_counts(source)[0] - counted[0])
        between.append(_counts(source)[1] - counted[1])
        requests.append(len(source.log) - before)
        fetched.append(sum(end - begin for _, begin, end in source.log[before:]))
        carried = Counter(
            unit
            for key, begin, end in source.log[before:]
            for unit in source.indices_within(key, begin, end)
        )
        twice_in_an_epoch += sum(1 for count in carried.values() if count > 1)
    twice = sum(1 for ev in events.values() for a, b in itertools.pairwise(ev) if a == b == "fetch")
    return Epochs(requests, fetched, twice, twice_in_an_epoch, batches, used, between)


def _counts(source: LoggedShards) -> tuple[int, int]:
    """The cache's ``(bytes_used, bytes_between)`` now (zeros without a cache)."""
    if source.cache is None:
        return 0, 0
    stats = source.cache.statistics()
    return stats.bytes_used, stats.bytes_between


def expected_batches(want: Sequence[bytes], sampler: Any, steps: range) -> list[list[bytes]]:
    return [[want[i] for i in plan_batch(sampler, SEED, g).indices.tolist()] for g in steps]
