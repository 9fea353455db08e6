"""``aioloader plan``: padding efficiency of arrival order, bucketing and packing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .._progress import Progress
from ._arguments import CommandError, add_option, positive


def add_parser(commands: Any) -> None:
    """Add ``plan`` to the subcommands."""
    parser = commands.add_parser(
        "plan",
        help="steps per epoch and padding efficiency of a file of sequence lengths",
        description=(
            "Read sequence lengths (integers separated by whitespace or commas) and print, "
            "for arrival order, bucketing and packing: batches per epoch, rows, computed "
            "positions and the fraction of real tokens."
        ),
    )
    parser.add_argument("lengths", metavar="LENGTHS", help="file of lengths ('-': stdin)")
    add_option(parser, "--batch-size", positive, "B", "sequences per batch", required=True)
    add_option(parser, "--context-length", positive, "L", "packed row length (default: max)")
    add_option(parser, "--pool-batches", positive, "N", "bucketing pool size", default=100)
    parser.add_argument(
        "--plot", metavar="PNG", help="also write a bar chart of real tokens by strategy"
    )
    parser.set_defaults(run=run)


def read_lengths(source: str) -> list[int]:
    """Integers separated by whitespace or commas, from a file or standard input."""
    text = sys.stdin.read() if source == "-" else _read_text(source)
    lengths = []
    for token in text.replace(",", " ").split():
        try:
            lengths.append(int(token))
        except ValueError:
            raise CommandError(f"lengths must be integers but got {token!r} in {source}") from None
    if not lengths:
        raise CommandError(f"{source} holds no lengths")
    return lengths


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise CommandError(f"cannot read {path}: {reason}") from None


def check_plot_path(path: str) -> None:
    """Refuse, before any work, a plot whose folder is missing or that matplotlib lacks."""
    folder = Path(path).resolve().parent
    if not folder.is_dir():
        raise CommandError(f"--plot {path}: the folder {str(folder)!r} does not exist")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CommandError("--plot needs matplotlib (pip install 'aioloader[plot]')") from None


def run(args: argparse.Namespace) -> list[str]:
    """The table (and the plot), built in full before anything is printed."""
    from ..core import padding_report

    if args.plot:
        check_plot_path(args.plot)
    lengths = read_lengths(args.lengths)
    context = args.context_length or max(lengths)
    lines = [
        f"{len(lengths):,} sequences, {sum(lengths):,} tokens, batch size {args.batch_size}",
        "| strategy | batches/epoch | rows | positions | real tokens |",
        "|---|---:|---:|---:|---:|",
    ]
    reports = []
    bar = Progress(3, "strategies")
    for strategy in ("arrival", "bucketed", "packed"):
        report = padding_report(
            lengths,
            args.batch_size,
            strategy,
            context_length=context if strategy == "packed" else None,
            pool_batches=args.pool_batches if strategy == "bucketed" else None,
        )
        bar.advance()
        name = f"packed ({context})" if strategy == "packed" else strategy
        reports.append((name, report.efficiency))
        lines.append(
            f"| {name} | {report.batches:,} | {report.rows:,} | {report.total_slots:,} "
            f"| {report.efficiency:.1%} |"
        )
    if args.plot:
        plot_efficiency(args.plot, reports, args.batch_size)
        lines.append(f"wrote {args.plot}")
    return lines


def plot_efficiency(path: str, reports: list[tuple[str, float]], batch_size: int) -> None:
    """A bar chart of the fraction of real tokens per strategy (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(5, 3))
    try:
        names = [name for name, _ in reports]
        values = [100 * value for _, value in reports]
        bars = axes.bar(names, values, color=["#b0b0b0", "#6a9fd4", "#2e7d32"])
        axes.bar_label(bars, labels=[f"{v:.1f}%" for v in values])
        axes.set_ylim(0, 110)
        axes.set_ylabel("real tokens / computed positions (%)")
        axes.set_title(f"Padding efficiency, batch size {batch_size}")
        figure.tight_layout()
        try:
            figure.savefig(path, dpi=110)
        except (OSError, ValueError) as error:
            raise CommandError(f"--plot {path}: cannot write the plot: {error}") from None
    finally:
        plt.close(figure)
