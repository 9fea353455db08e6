"""Time to first batch of TarShards on SeaweedFS (+20 ms per request): prebuilt index or not.

Run: ``python -m benchmarks.micro.bench_tar_index [--samples 2048] [--shards 8] [--rounds 3]``.
docs/benchmarks.md (micro-benchmarks) says what it measures.
"""

from __future__ import annotations

import argparse
import io
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


def _shard(first: int, count: int, rng: np.random.Generator) -> bytes:
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    per = args.samples // args.shards
    with SeaweedServer(bucket="bench") as server, tempfile.TemporaryDirectory() as index_dir:
        keys = [f"w/shard-{s:03d}.tar" for s in range(args.shards)]
        for s, key in enumerate(keys):
            obstore.put(server.store(), key, _shard(s * per, per, rng))
        with LatencyRelay(server.info.endpoint, delay=0.02) as relay:
            store = server.info.store(endpoint=relay.endpoint)
            TarShards(keys, store, index_dir=index_dir)  # writes the saved indices
            sampler = ShuffledSampler(per * args.shards, 64)
            first = sampler.indices(0, 0, 0).tolist()
            times: dict[str, list[float]] = {
                "prebuilt": [],
                "on the fly": [],
                "on the fly, cache": [],
                "before": [],
            }
            for _ in range(args.rounds):
                for row in times:
                    _tar.REMOTE_CHUNK, _tar.REMOTE_AHEAD = (
                        (1 << 20, 0) if row == "before" else (4 << 20, 4)
                    )
                    fresh = server.info.store(endpoint=relay.endpoint)  # no warm connections
                    started = time.perf_counter()
                    cache = KnownFutureCache(1 << 30) if row.endswith("cache") else None
                    source = TarShards(
                        keys,
                        fresh,
                        index_dir=index_dir if row == "prebuilt" else None,
                        cache=cache,
                    )
                    if cache is not None:
                        cache.plan(sampler, 0, 0)
                    anyio.run(source.get_samples, first)
                    times[row].append(time.perf_counter() - started)
            del store
    medians = {row: statistics.median(values) for row, values in times.items()}
    for row, value in medians.items():
        print(f"{row:18s} median {value:.3f} s  all {[round(v, 3) for v in times[row]]}")
    print(f"on the fly / prebuilt = {medians['on the fly'] / medians['prebuilt']:.2f}")
    print(
        f"on the fly, cache / prebuilt = {medians['on the fly, cache'] / medians['prebuilt']:.2f}"
    )
    print(f"before / prebuilt = {medians['before'] / medians['prebuilt']:.2f}")


if __name__ == "__main__":
    main()
