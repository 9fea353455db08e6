"""The ``aioloader`` command: ``demo``, ``digest``, ``plan``, ``tune``, ``bench``, ``ingest``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

BACKENDS = ("asyncio", "uvloop", "trio")


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer but got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 but got {value}")
    return value


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 but got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="aioloader",
        description="A deterministic, resumable, asyncio-native data loader for ML training.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="stream the spec's line-image workload and print batches/s",
        description=(
            "Stream the spec's synthetic line-image workload (2,048 images, batch 128, width "
            "multiple 4, gain-and-offset augmentation, shuffled) and print batches/s, the "
            "share of time the consumer waited for data, and a digest of the stream. The "
            "digest of a range of steps is the same for any --workers, --prefetch or "
            "--start-step."
        ),
    )
    demo.add_argument("--workers", type=_non_negative, default=1, help="CPU threads (default 1)")
    demo.add_argument("--prefetch", type=_positive, default=8, help="ring slots (default 8)")
    demo.add_argument("--steps", type=_positive, default=500, help="batches (default 500)")
    demo.add_argument("--start-step", type=_non_negative, default=0, help="first global step")
    demo.add_argument("--seed", type=_non_negative, default=0, help="run seed (default 0)")
    demo.add_argument("--backend", choices=BACKENDS, default="asyncio", help="event loop")
    demo.add_argument(
        "--no-digest", action="store_true", help="do not hash batches (pure loader speed)"
    )
    digest = commands.add_parser(
        "digest",
        help="fingerprint the batches of steps START..STOP-1 of a config",
        description=(
            "Print a SHA-256 over every array of every batch of global steps [START, STOP). "
            "Two machines, worker counts or ports agree on a config iff they print the "
            "same digest."
        ),
    )
    digest.add_argument("config", nargs="?", help=".json or .py config (default: the demo)")
    digest.add_argument("--start", type=_non_negative, default=0, help="first global step")
    digest.add_argument("--stop", type=_positive, default=32, help="one past the last step")
    digest.add_argument("--workers", type=_non_negative, default=0)
    digest.add_argument("--prefetch", type=_positive, default=8)
    plan = commands.add_parser(
        "plan",
        help="steps per epoch and padding efficiency of a file of sequence lengths",
        description=(
            "Read sequence lengths (integers separated by whitespace or commas) and print, "
            "for arrival order, bucketing and packing: batches per epoch, real tokens, "
            "computed positions and the fraction of real tokens."
        ),
    )
    plan.add_argument("lengths", help="file of integer lengths ('-' for standard input)")
    plan.add_argument("--batch-size", type=_positive, required=True, help="sequences per batch")
    plan.add_argument(
        "--context-length", type=_positive, help="packed row length (default: the longest)"
    )
    plan.add_argument("--pool-batches", type=_positive, default=100, help="bucketing pool size")
    plan.add_argument(
        "--plot", metavar="PNG", help="also write a bar chart of real tokens by strategy"
    )
    tune = commands.add_parser(
        "tune",
        help="measure load time per batch and recommend workers and prefetch",
        description=(
            "Measure the time to load one batch of a config, then apply the idealised model "
            "(a worker makes a batch every LOAD ms, the trainer takes one every STEP ms): "
            "recommend W = ceil(LOAD / STEP) workers and print the epoch time per W."
        ),
    )
    tune.add_argument("config", nargs="?", help=".json or .py config (default: the demo)")
    tune.add_argument("--step-ms", type=float, required=True, help="the trainer's step time")
    tune.add_argument("--load-ms", type=float, help="skip measuring: the load time per batch")
    tune.add_argument("--batches", type=_positive, default=64, help="batches to measure")
    bench = commands.add_parser(
        "bench",
        help="run every benchmark workload against torch, SPDL and Grain (source checkout)",
        description=(
            "Run benchmarks/run.py of a source checkout: every workload on every system, "
            "interleaved over several rounds, then write results.md, results.json and "
            "results.png. Needs the benchmark extras (torch, spdl, grain, matplotlib); "
            "systems whose package is missing are left out."
        ),
    )
    bench.add_argument("--quick", action="store_true", help="tiny sizes, one round (smoke)")
    bench.add_argument("--rounds", type=_positive, help="kept rounds (default 7, quick 1)")
    bench.add_argument("--output", help="directory for the results (default benchmarks/results)")
    bench.add_argument("--workloads", help="comma-separated subset of W1,W3,W4")
    from .ingest._command import add_parser as add_ingest_parser

    add_ingest_parser(commands)
    return parser


def bench_script() -> Path:
    """``benchmarks/run.py`` next to the package (a source checkout or editable install)."""
    return Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"


def _run_bench(args: argparse.Namespace) -> int:
    import importlib.util

    script = bench_script()
    if not script.is_file():
        raise SystemExit(
            f"aioloader bench: needs a source checkout, but {script} does not exist; "
            "clone the repository and install it with `pip install -e .[bench]`"
        )
    argv = ["--quick"] if args.quick else []
    for flag, value in (
        ("--rounds", args.rounds),
        ("--output", args.output),
        ("--workloads", args.workloads),
    ):
        if value is not None:
            argv += [flag, str(value)]
    spec = importlib.util.spec_from_file_location("aioloader_benchmarks_run", script)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has one
        raise SystemExit(f"aioloader bench: cannot load {script}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result: int = module.main(argv)
    return result


def _run_digest(args: argparse.Namespace) -> int:
    import anyio

    from ._config import load_factory
    from .core._digest import digest_batch

    if args.stop <= args.start:
        raise SystemExit(
            f"aioloader digest: --stop must be > --start ({args.start}) but got {args.stop}"
        )
    loader = load_factory(args.config)(workers=args.workers, prefetch=args.prefetch)

    async def fingerprint() -> str:
        import hashlib

        combined = hashlib.sha256()
        async with loader.stream(args.start, args.stop) as batches:
            async for batch in batches:
                combined.update(digest_batch(batch).encode())
                release = getattr(batch, "release", None)
                if callable(release):
                    release()
        return combined.hexdigest()

    print(f"{anyio.run(fingerprint)}  steps {args.start}..{args.stop - 1}")
    return 0


def read_lengths(source: str) -> list[int]:
    """Integers separated by whitespace or commas, from a file or standard input."""
    text = sys.stdin.read() if source == "-" else _read_text(source)
    lengths = []
    for token in text.replace(",", " ").split():
        try:
            lengths.append(int(token))
        except ValueError:
            raise SystemExit(
                f"aioloader plan: lengths must be integers but got {token!r} in {source}"
            ) from None
    if not lengths:
        raise SystemExit(f"aioloader plan: {source} holds no lengths")
    return lengths


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as error:
        raise SystemExit(f"aioloader plan: cannot read {path}: {error.strerror}") from None


def _run_plan(args: argparse.Namespace) -> int:
    from ._progress import Progress
    from .core._packing import padding_report

    lengths = read_lengths(args.lengths)
    context = args.context_length or max(lengths)
    print(f"{len(lengths):,} sequences, {sum(lengths):,} tokens, batch size {args.batch_size}")
    reports = []
    print("| strategy | batches/epoch | rows | positions | real tokens |")
    print("|---|---:|---:|---:|---:|")
    bar = Progress(3, "strategies")
    for strategy in ("arrival", "bucketed", "packed"):
        try:
            report = padding_report(
                lengths,
                args.batch_size,
                strategy,
                context_length=context if strategy == "packed" else None,
                pool_batches=args.pool_batches if strategy == "bucketed" else None,
            )
        except ValueError as error:
            raise SystemExit(f"aioloader plan: {error}") from None
        bar.advance()
        name = f"packed ({context})" if strategy == "packed" else strategy
        reports.append((name, report.efficiency))
        print(
            f"| {name} | {report.batches:,} | {report.rows:,} | {report.total_slots:,} "
            f"| {report.efficiency:.1%} |"
        )
    if args.plot:
        plot_efficiency(args.plot, reports, args.batch_size)
        print(f"wrote {args.plot}")
    return 0


def plot_efficiency(path: str, reports: list[tuple[str, float]], batch_size: int) -> None:
    """A bar chart of the fraction of real tokens per strategy (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit(
            "aioloader plan: --plot needs matplotlib (pip install 'aioloader[bench]')"
        ) from None
    figure, axes = plt.subplots(figsize=(5, 3))
    names = [name for name, _ in reports]
    values = [100 * value for _, value in reports]
    bars = axes.bar(names, values, color=["#b0b0b0", "#6a9fd4", "#2e7d32"])
    axes.bar_label(bars, labels=[f"{v:.1f}%" for v in values])
    axes.set_ylim(0, 110)
    axes.set_ylabel("real tokens / computed positions (%)")
    axes.set_title(f"Padding efficiency, batch size {batch_size}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _run_tune(args: argparse.Namespace) -> int:
    import time

    from ._config import load_factory
    from ._tuning import epoch_time, recommend_workers

    if args.step_ms <= 0:
        raise SystemExit(f"aioloader tune: --step-ms must be > 0 but got {args.step_ms}")
    if args.load_ms is None:
        loader = load_factory(args.config)(workers=0, prefetch=1)
        started = time.perf_counter()
        for batch in loader.iter_sync(0, args.batches):
            release = getattr(batch, "release", None)
            if callable(release):
                release()
        load = (time.perf_counter() - started) / args.batches
        print(f"measured load time per batch: {load * 1e3:.2f} ms over {args.batches} batches")
    else:
        load = args.load_ms / 1e3
    step = args.step_ms / 1e3
    workers = recommend_workers(load, step)
    batches = 12
    print(f"recommended: workers={workers}, prefetch={max(2, 2 * workers)}")
    print(
        f"idealised epoch of {batches} batches (load {load * 1e3:.1f} ms, step {args.step_ms} ms):"
    )
    for count in range(workers + 2):
        estimate = epoch_time(load, step, batches, count)
        print(f"  workers={count}: {estimate.epoch_seconds * 1e3:.0f} ms")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``aioloader`` and ``python -m aioloader``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _dispatch(args)
    except (ValueError, TypeError) as error:
        parser.exit(2, f"aioloader {args.command}: error: {error}\n")


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo":
        from ._demo import demo_main

        result = demo_main(
            workers=args.workers,
            prefetch=args.prefetch,
            steps=args.steps,
            start_step=args.start_step,
            seed=args.seed,
            backend=args.backend,
            digest=not args.no_digest,
            progress=True,
        )
        last = args.start_step + args.steps
        print(
            f"steps {args.start_step}..{last - 1}  workers {args.workers}  prefetch {args.prefetch}"
        )
        print(f"batches/s     {result.batches_per_second:,.0f}")
        print(f"consumer wait {result.wait_share:.1%} of the run")
        if not args.no_digest:
            print(f"digest        {result.digest}")
        return 0
    if args.command == "digest":
        return _run_digest(args)
    if args.command == "tune":
        return _run_tune(args)
    if args.command == "plan":
        return _run_plan(args)
    if args.command == "bench":
        return _run_bench(args)
    if args.command == "ingest":
        from .ingest._command import run as run_ingest

        return run_ingest(args)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
