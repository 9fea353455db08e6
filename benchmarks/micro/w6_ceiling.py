"""The CPU ceiling of W6 and W8: their per-sample work alone, on this machine's cores.

W6's ``preprocess`` (Pillow decode, resize to 224, normalise) and ``collate`` over its
JPEGs held in memory, in batches of 64, with no reads and no loader: on one thread, on
``--threads`` threads (a pool mapping each batch's samples) and on ``--processes`` processes
(one batch each). Every row of W6 and W8 does this work and its reads besides, so no loader
there can pass these figures; the report divides them by a peer's images/s (``--peer``).
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from workloads import w6_data

BATCH = 64


def _batch(jpegs: Sequence[bytes]) -> int:
    images = [w6_data.preprocess(jpeg) for jpeg in jpegs]
    ids = list(range(len(images)))
    return len(w6_data.collate(images, ids, ids)["id"])


def _batches(jpegs: list[bytes]) -> list[list[bytes]]:
    return [jpegs[i : i + BATCH] for i in range(0, len(jpegs), BATCH)]


def on_threads(jpegs: list[bytes], threads: int) -> float:
    """Images per second: each batch's samples mapped over ``threads`` threads, then collated."""
    with futures.ThreadPoolExecutor(threads) as pool:
        started = time.perf_counter()
        for batch in _batches(jpegs):
            images = list(pool.map(w6_data.preprocess, batch))
            ids = list(range(len(images)))
            w6_data.collate(images, ids, ids)
        return len(jpegs) / (time.perf_counter() - started)


def on_processes(jpegs: list[bytes], processes: int) -> float:
    """Images per second: whole batches built on ``processes`` processes (started before)."""
    with futures.ProcessPoolExecutor(processes) as pool:
        list(pool.map(_batch, _batches(jpegs)[:processes]))  # started and imported
        started = time.perf_counter()
        done = sum(pool.map(_batch, _batches(jpegs)))
        return done / (time.perf_counter() - started)


def rounds(measure: Callable[[], float], count: int) -> list[float]:
    return [measure() for _ in range(count)]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=4096, help="W6's images (default 4096)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each (default 3)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--peer", type=float, default=None, help="a peer's images/s to divide")
    args = parser.parse_args(argv)
    folder = w6_data.generate(w6_data.cache_dir(args.images, 2026), args.images, 2026)
    jpegs = [w6_data.read_jpeg(folder, i) for i in range(args.images)]
    figures = {
        "1 thread": rounds(lambda: on_threads(jpegs[:1024], 1), args.rounds),
        f"{args.threads} threads": rounds(lambda: on_threads(jpegs, args.threads), args.rounds),
        f"{args.processes} processes": rounds(
            lambda: on_processes(jpegs, args.processes), args.rounds
        ),
    }
    print(
        "| work | images/s (median) | min-max |" + (" 1.2x the peer needs |" if args.peer else "")
    )
    print("|---|---:|---:|" + ("---:|" if args.peer else ""))
    for name, values in figures.items():
        median = statistics.median(values)
        row = f"| {name} | {median:.0f} | {min(values):.0f}-{max(values):.0f} |"
        if args.peer:
            row += f" {1.2 * args.peer / median:.2f} of it |"
        print(row)
    return figures


if __name__ == "__main__":
    main()
