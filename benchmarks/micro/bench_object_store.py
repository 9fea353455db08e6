"""Object-store read throughput: ObjectStore against a hand-written aiohttp client and torch.

Run: ``.venv/bin/python benchmarks/micro/bench_object_store.py`` (two to three minutes).
The clients are W2's (``workloads/w2_object_store.py``), run here standalone with their own
options. docs/benchmarks.md (micro-benchmarks) says what it measures.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
for _path in (REPO_ROOT, REPO_ROOT / "benchmarks"):  # tests._support (S3 server), workloads
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from storage import DELAY  # noqa: E402
from workloads.w2_object_store import (  # noqa: E402
    BATCH,
    CPU_PER_SAMPLE,
    OBJECT_SIZE,
    TORCH_PROXY_OBJECTS,
    bench_aiohttp,
    bench_aioloader,
    bench_torch,
    serving,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--client-options", default="{}", help="obstore ClientConfig as JSON")
    parser.add_argument("--skip-torch", action="store_true")
    args = parser.parse_args()
    n, repeats, client_options = args.objects, args.repeats, json.loads(args.client_options)
    rows: list[str] = []
    rates: dict[tuple[str, str, int], float] = {}

    def record(path: str, client: str, inflight: int, rate: float) -> None:
        rates[path, client, inflight] = rate
        bound = inflight / DELAY if path != "direct" else None
        cpu = None if client.endswith(" 2 workers") else CPU_PER_SAMPLE[0]
        cells = [path, client, str(inflight), f"{rate:,.0f}", f"{rate * OBJECT_SIZE / 2**20:,.0f}"]
        cells += [f"{bound:,.0f}", f"{rate / bound:.0%}"] if bound else ["-", "-"]
        cells.append(f"{cpu * 1e6:,.0f}" if cpu is not None else "-")
        rows.append("| " + " | ".join(cells) + " |")
        print(rows[-1], file=sys.stderr)

    with serving(n, functools.partial(print, file=sys.stderr)) as (info, paths):
        for path, endpoint in paths:
            for inflight in (64, 256):
                rate = bench_aioloader(info, endpoint, inflight, n, repeats, client_options)
                record(path, "aioloader ObjectStore", inflight, rate)
                rate = bench_aiohttp(info, endpoint, inflight, n, repeats)
                record(path, "hand-written aiohttp", inflight, rate)
            count = n if path == "direct" else min(n, TORCH_PROXY_OBJECTS)
            for workers in () if args.skip_torch else (0, 2):
                rate = bench_torch(info, endpoint, workers, count, 1)
                record(path, f"torch DataLoader, {workers} workers", max(workers, 1), rate)
    print(f"\n{n} objects x 64 KiB, batches of {BATCH}, np.frombuffer; best of {repeats}\n")
    print(
        "| path | client | reads in flight | samples/s | MiB/s | latency bound | of bound "
        "| client CPU µs/sample |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|", *rows, "", sep="\n")
    for path in ("direct", "+20 ms"):
        ours = rates[path, "aioloader ObjectStore", 256]
        ratio = ours / rates[path, "hand-written aiohttp", 256]
        line = f"{path}: aioloader / aiohttp at 256 in flight = {ratio:.2f}x"
        if torch := rates.get((path, "torch DataLoader, 2 workers", 2)):
            line += f"; aioloader (256) / torch (2 workers) = {ours / torch:.1f}x"
        if path != "direct":
            share = rates[path, "aioloader ObjectStore", 64] / (64 / DELAY)
            line += f"; aioloader at 64 in flight = {share:.0%} of the latency bound"
        print(line)


if __name__ == "__main__":
    main()
