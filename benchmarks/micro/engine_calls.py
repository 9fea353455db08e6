"""The engine's own Python work per batch and per sample, with W1u's user code.

Counts every Python function call (``sys.setprofile`` / ``threading.setprofile`` "call"
events; a coroutine resumed counts as a call) made while a loader delivers W1u's batches,
leaving out the user's dataset, transform and collate and everything they call. The count
is deterministic enough to cut (the event loop's turns vary it by a few), unlike a timing
on a shared machine. With ``--cpu 1`` it also times the loader's run and the plain loop in
CPU seconds (``time.process_time``, every thread), and the user's transform and collate
inside and outside the loader (``time.thread_time`` around each call).

Run: ``python benchmarks/micro/engine_calls.py [--steps 64] [--top 20] [--cpu 1]``.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).parents[1]))  # the workloads, as run.py imports them
sys.path.insert(0, str(Path(__file__).parents[2]))
from workloads import w1u_user_code as w1u

from aioloader import DataLoader, load_kernels
from aioloader.datasets import line_images
from benchmarks.micro._common import options

USER = {
    w1u.transform.__code__,
    w1u.transform_with_rng.__code__,
    w1u.collate.__code__,
    w1u.collate_with_plan.__code__,
    w1u.AsyncImages.get_sample.__code__,
}
ROWS = [
    (consumer, kind, workers)
    for consumer in ("async for", "iter_sync")
    for kind in ("async", "sync")
    for workers in (0, 2)
]


def _family(filename: str) -> str:
    for name in ("aioloader", "anyio", "asyncio", "uvloop", "numpy", "concurrent", "threading"):
        if f"/{name}/" in filename or filename.endswith(f"/{name}.py"):
            return name
    return "other"


class CallCounter:
    """Counts Python calls by the family of the called code, outside ``USER`` code.

    ``driver`` codes (the benchmark's own loop) are neither counted nor a boundary.
    """

    def __init__(self, driver: set[Any]) -> None:
        self.driver = driver
        self.counts: collections.Counter[str] = collections.Counter()
        self.where: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code in self.driver:
            return
        walk = frame
        while walk is not None:
            if walk.f_code in USER:
                return
            walk = walk.f_back
        family = _family(code.co_filename)
        with self._lock:
            self.counts[family] += 1
            self.where[f"{family}:{code.co_name}"] += 1

    def __enter__(self) -> CallCounter:
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)
        threading.setprofile(None)


def images() -> list[Any]:
    cfg = w1u.W1uConfig()
    return [sample.image for sample in line_images(cfg.images, seed=w1u.SEED)._samples]


def make_loader(kind: str, workers: int) -> tuple[DataLoader[Any, Any], int]:
    """W1u's row: its dataset (async or a list), sampler, collate and transform."""
    cfg = w1u.W1uConfig()
    dataset: Any = w1u.AsyncImages(images()) if kind == "async" else images()
    sampler, collate = w1u.parts(cfg)
    loader = DataLoader(
        dataset, sampler, collate, seed=w1u.SEED, transform=w1u.transform, workers=workers
    )
    return loader, cfg.batch


def consume_async(loader: DataLoader[Any, Any], start: int, stop: int) -> None:
    async def run() -> None:
        async with loader.stream(start, stop) as batches:
            async for _ in batches:
                pass

    anyio.run(run, backend="asyncio", backend_options={"use_uvloop": True})


def consume_sync(loader: DataLoader[Any, Any], start: int, stop: int) -> None:
    for _ in loader.iter_sync(start, stop, backend_options={"use_uvloop": True}):
        pass


CONSUMERS = {"async for": consume_async, "iter_sync": consume_sync}


def count_calls(consumer: str, kind: str, workers: int, steps: int) -> CallCounter:
    """Count the calls of steps ``[steps, 2 * steps)``, after a warm stream."""
    loader, _ = make_loader(kind, workers)
    consume = CONSUMERS[consumer]
    consume(loader, 0, 4)  # warm: imports, the epoch's order
    with CallCounter({consume_async.__code__, consume_sync.__code__}) as counter:
        consume(loader, steps, 2 * steps)
    return counter


def plain(steps: int) -> None:
    """The plain loop, holding each batch while the next is made (as the harness does)."""
    for _ in w1u.PlainLoop(w1u.W1uConfig(), images())._run(steps):
        pass


def cpu_seconds(run: Callable[[], None]) -> float:
    started = time.process_time()
    run()
    return time.process_time() - started


def timed_user_code(run: Callable[[], None]) -> dict[str, float]:
    """Thread CPU seconds spent in the user's transform and collate during ``run()``."""
    spent: dict[str, float] = collections.defaultdict(float)
    transform, collate = w1u.transform, w1u.collate

    def timed(name: str, function: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def call(x: Any) -> Any:  # one parameter: the loader passes no rng
            started = time.thread_time()
            try:
                return function(x)
            finally:
                spent[name] += time.thread_time() - started

        return call

    w1u.transform, w1u.collate = timed("transform", transform), timed("collate", collate)
    try:
        run()
    finally:
        w1u.transform, w1u.collate = transform, collate
    return dict(spent)


def main(steps: int, top: int, cpu: int) -> None:
    load_kernels()  # no kernel load inside a counted or timed run
    for consumer, kind, workers in ROWS:
        batch = w1u.W1uConfig().batch
        counter = count_calls(consumer, kind, workers, steps)
        per_batch = sum(counter.counts.values()) / steps
        families = ", ".join(f"{k} {v / steps:.1f}" for k, v in counter.counts.most_common())
        print(
            f"{consumer:9} {kind:5} workers={workers}: {per_batch:7.1f} calls/batch "
            f"({per_batch / batch:.3f}/sample): {families}"
        )
        for where, calls in counter.where.most_common(top):
            print(f"    {calls / steps:8.2f}  {where}")
    if not cpu:
        return
    timed = 256
    rounds: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(5):  # interleaved: the machine's load shifts between rounds
        rounds["plain loop"].append(cpu_seconds(lambda: plain(timed)))
        for consumer, kind, workers in ROWS:
            loader, _ = make_loader(kind, workers)
            consume = CONSUMERS[consumer]
            consume(loader, 0, 4)
            name = f"{consumer} {kind} workers={workers}"
            rounds[name].append(cpu_seconds(lambda: consume(loader, 0, timed)))  # noqa: B023
    best = {name: min(values) for name, values in rounds.items()}
    for name, seconds in best.items():
        print(
            f"{name:28}: {seconds / timed * 1e3:.3f} ms CPU per batch (min of 5), "
            f"plain/this {best['plain loop'] / seconds:.3f}"
        )
    outside = timed_user_code(lambda: plain(timed))
    print("user code, CPU ms per batch:")
    print(f"  plain loop: { {k: round(v / timed * 1e3, 4) for k, v in outside.items()} }")
    for consumer, kind, workers in ROWS:

        def run(consumer: str = consumer, kind: str = kind, workers: int = workers) -> None:
            CONSUMERS[consumer](make_loader(kind, workers)[0], 0, timed)

        inside = timed_user_code(run)
        shown = {k: round(v / timed * 1e3, 4) for k, v in inside.items()}
        print(f"  {consumer} {kind} workers={workers}: {shown}")


if __name__ == "__main__":
    args = options(__doc__, steps=64, top=0, cpu=0)
    main(args.steps, args.top, args.cpu)
