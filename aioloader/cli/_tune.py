"""``aioloader tune``: measure the load time per batch, recommend workers and prefetch.

The measurement starts once the compiled kernels are loaded and ``WARM_UP`` batches have
been taken, so that it is the steady state's time per batch, not the start-up's.

``--auto`` instead runs the config with ``workers="auto", prefetch="auto"`` against a
trainer that takes ``--step-ms`` per batch, and reports what the autotuner chose and why.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from ..core import Decision, Knobs, release_batch
from ..engine import DataLoader
from ._arguments import add_option, positive, positive_float
from ._config import CONFIG_HELP, add_config_argument, load_factory
from ._kernels import ready_kernels
from ._tuning import epoch_time, recommend_workers

MAX_ROWS = 8
"""At most this many worker counts are printed, whatever the recommendation."""
WARM_UP = 2
"""Batches taken before the clock starts (the first one plans the epoch, fills the pool)."""


def add_parser(commands: Any) -> None:
    """Add ``tune`` to the subcommands."""
    parser = commands.add_parser(
        "tune",
        help="measure load time per batch and recommend workers and prefetch",
        description=(
            "Measure the time to load one batch of a config (or take --load-ms; measured "
            f"after the compiled kernels have loaded and {WARM_UP} warm-up batches), then apply "
            "the idealised model (a worker makes a batch every LOAD ms, the trainer takes one "
            "every STEP ms): recommend W = ceil(LOAD / STEP) workers and print the epoch time "
            f"for at most {MAX_ROWS} worker counts around W. The epoch length is the config's "
            "steps per epoch unless --epoch-batches is given. " + CONFIG_HELP
        ),
    )
    add_config_argument(parser)
    add_option(parser, "--step-ms", positive_float, "MS", "trainer step time", required=True)
    add_option(parser, "--load-ms", positive_float, "MS", "skip measuring: load time/batch")
    add_option(parser, "--batches", positive, "N", "batches to measure (64)", default=64)
    epoch_text = "batches per epoch (default: the config's steps per epoch)"
    add_option(parser, "--epoch-batches", positive, "N", epoch_text)
    parser.add_argument(
        "--auto",
        action="store_true",
        help="run workers='auto', prefetch='auto' for --batches batches (the trainer sleeps "
        "--step-ms per batch) and print what the autotuner chose and why",
    )
    parser.set_defaults(run=run)


def describe_autotune(start: Knobs, end: Knobs, decisions: tuple[Decision, ...]) -> list[str]:
    """The autotuner's choice and its decisions log, one line each.

    >>> describe_autotune(Knobs(1, 2, 64), Knobs(1, 2, 64), ())
    ['auto chose: workers=1, prefetch=2, reads in flight=64', 'no change: the trainer \
never waited long enough to turn a knob']
    """
    lines = [
        f"auto chose: workers={end.workers}, prefetch={end.prefetch}, reads in flight={end.reads}"
    ]
    if not decisions:
        lines.append("no change: the trainer never waited long enough to turn a knob")
        return lines
    lines.append(
        f"started at workers={start.workers}, prefetch={start.prefetch}, "
        f"reads in flight={start.reads}; decisions:"
    )
    lines.extend(f"  step {d.step}: {d.knob} {d.old} -> {d.new} ({d.reason})" for d in decisions)
    return lines


def run_auto(args: argparse.Namespace) -> list[str]:
    """Run the config autotuned against a trainer of ``--step-ms`` and describe the outcome."""
    loader = load_factory(args.config)(workers="auto", prefetch="auto")
    start = Knobs(loader.workers, loader.prefetch, loader.max_inflight_reads)
    step = args.step_ms / 1e3
    for batch in loader.iter_sync(0, args.batches):
        release_batch(batch)
        time.sleep(step)  # the trainer's step
    stats = loader.statistics()
    assert stats.knobs is not None
    lines = [
        f"ran {args.batches} batches autotuned against a {args.step_ms:g} ms step; "
        f"consumer waited {stats.consumer_wait_seconds * 1e3:.1f} ms in all"
    ]
    return lines + describe_autotune(start, stats.knobs, stats.decisions)


def measure_load(loader: DataLoader[Any, Any], batches: int) -> float:
    """Seconds per batch over ``batches`` batches, taken after ``WARM_UP`` untimed ones."""
    started = time.perf_counter()
    for seen, batch in enumerate(loader.iter_sync(0, WARM_UP + batches)):
        release_batch(batch)
        if seen == WARM_UP - 1:
            started = time.perf_counter()
    return (time.perf_counter() - started) / batches


def worker_counts(recommended: int, limit: int = MAX_ROWS) -> list[int]:
    """The worker counts to print: 0 to W + 1 when that is short, else a spread around W.

    >>> worker_counts(3)
    [0, 1, 2, 3, 4]
    >>> worker_counts(1000)
    [0, 1, 2, 250, 500, 999, 1000, 1001]
    """
    if recommended + 2 <= limit:
        return list(range(recommended + 2))
    picked = {0, 1, 2, recommended // 4, recommended // 2, recommended - 1, recommended}
    picked.add(recommended + 1)
    return sorted(picked)[:limit]


def run(args: argparse.Namespace) -> list[str]:
    """Measure (unless ``--load-ms``) and return the recommendation's lines."""
    if args.auto:
        if args.load_ms is not None:
            raise ValueError("--auto measures a real run, so it takes no --load-ms")
        return run_auto(args)
    lines = []
    loader = load_factory(args.config)(workers=0, prefetch=1)
    batches = args.epoch_batches or int(loader.steps_per_epoch)
    if args.load_ms is None:
        kernels, note = ready_kernels()
        load = measure_load(loader, args.batches)
        lines.append(
            f"measured load time per batch: {load * 1e3:.2f} ms over {args.batches} batches "
            f"after {WARM_UP} warm-up batches; kernels {kernels} ({note})"
        )
    else:
        load = args.load_ms / 1e3
    step = args.step_ms / 1e3
    workers = recommend_workers(load, step)
    lines.append(f"recommended: workers={workers}, prefetch={max(2, 2 * workers)}")
    cores = os.cpu_count() or 1
    if workers > cores:
        lines.append(f"note: {workers} workers is more than this machine's {cores} cores")
    source = "--epoch-batches" if args.epoch_batches else "the config"
    lines.append(
        f"idealised epoch of {batches:,} batches ({source}; load {load * 1e3:.1f} ms, "
        f"step {args.step_ms:g} ms):"
    )
    for count in worker_counts(workers):
        estimate = epoch_time(load, step, batches, count)
        lines.append(f"  workers={count}: {_duration(estimate.epoch_seconds)}")
    return lines


def _duration(seconds: float) -> str:
    """Milliseconds below a second, then seconds, minutes or hours.

    >>> _duration(0.66), _duration(32.0), _duration(90.0), _duration(7200.0)
    ('660 ms', '32.0 s', '1.5 min', '2.0 h')
    """
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:,.1f} h"
