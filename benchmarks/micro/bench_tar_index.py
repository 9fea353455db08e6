"""Time to first batch of TarShards on SeaweedFS (+20 ms per request): prebuilt index or not."""

import io
import itertools
import statistics
import tarfile
import tempfile
import time

import anyio
import numpy as np
import obstore

from aioloader.core import ShuffledSampler
from aioloader.sources import KnownFutureCache, _tar
from aioloader.sources._tar import TarShards
from tests._support.relay import LatencyRelay
from tests._support.s3 import SeaweedServer

from ._common import options

ROWS = ("prebuilt", "on the fly", "on the fly, cache", "before")  # before: 1 MiB windows, serial


def _shard(first: int, count: int, rng: np.random.Generator) -> bytes:
    """A tar of samples ``first..first+count-1``: a 40-100 KB ``.jpg`` and a ``.cls`` each."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for i in range(first, first + count):
            for field, data in (
                ("jpg", rng.integers(0, 256, int(rng.integers(40_000, 100_000)), np.uint8)),
                ("cls", np.frombuffer(str(i % 10).encode(), np.uint8)),
            ):
                info = tarfile.TarInfo(f"{i:06d}.{field}")
                info.size = data.size
                archive.addfile(info, io.BytesIO(data.tobytes()))
    return buffer.getvalue()


if __name__ == "__main__":
    args = options(__doc__, samples=2048, shards=8, rounds=3)
    rng, per = np.random.default_rng(0), args.samples // args.shards
    keys = [f"w/shard-{s:03d}.tar" for s in range(args.shards)]
    sampler = ShuffledSampler(per * args.shards, 64)
    times: dict[str, list[float]] = {row: [] for row in ROWS}
    with SeaweedServer(bucket="bench") as server, tempfile.TemporaryDirectory() as index_dir:
        for s, key in enumerate(keys):
            obstore.put(server.store(), key, _shard(s * per, per, rng))
        with LatencyRelay(server.info.endpoint, delay=0.02) as relay:
            TarShards(keys, server.info.store(endpoint=relay.endpoint), index_dir=index_dir)
            for _, row in itertools.product(range(args.rounds), ROWS):
                _tar.REMOTE_CHUNK, _tar.REMOTE_AHEAD = (
                    (1 << 20, 0) if row == "before" else (4 << 20, 4)
                )
                store = server.info.store(endpoint=relay.endpoint)  # no warm connections
                started = time.perf_counter()
                cache = KnownFutureCache(1 << 30) if row.endswith("cache") else None
                prebuilt = index_dir if row == "prebuilt" else None
                source = TarShards(keys, store, index_dir=prebuilt, cache=cache)
                if cache is not None:
                    cache.plan(sampler, 0, 0)
                anyio.run(source.get_samples, sampler.indices(0, 0, 0).tolist())
                times[row].append(time.perf_counter() - started)
    medians = {row: statistics.median(values) for row, values in times.items()}
    for row, value in medians.items():
        print(f"{row:18s} median {value:.3f} s  all {[round(v, 3) for v in times[row]]}")
    for row in ROWS[1:]:
        print(f"{row} / prebuilt = {medians[row] / medians['prebuilt']:.2f}")
