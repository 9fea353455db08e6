"""``aioloader bench``: run benchmarks/run.py of a source checkout into a new folder."""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from ._arguments import CommandError, add_option, positive

RESULTS_ROOT = Path("bench-results")
"""Where each run's new folder goes (relative to the working directory)."""


def add_parser(commands: Any) -> None:
    """Add ``bench`` to the subcommands."""
    parser = commands.add_parser(
        "bench",
        help="run every benchmark workload against torch, SPDL and Grain (source checkout)",
        description=(
            "Run benchmarks/run.py of a source checkout: every workload on every system, "
            "interleaved over several rounds, then write results.md, results.json and "
            f"results.png into a new folder {RESULTS_ROOT}/<UTC timestamp>/ (or --output). "
            "--update-results writes the tracked benchmarks/results/ instead. Needs the "
            "benchmark extras (pip install -e '.[bench]'); systems whose package is missing "
            "are left out."
        ),
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round (smoke)")
    add_option(parser, "--rounds", positive, "N", "kept rounds (default 7, quick 1)")
    parser.add_argument(
        "--workloads", metavar="W1,W3,...", help="comma-separated subset of the workloads"
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--output", metavar="DIR", help="a new folder for the results")
    where.add_argument(
        "--update-results",
        action="store_true",
        help="overwrite the tracked results in benchmarks/results/",
    )
    parser.set_defaults(run=run)


def bench_script() -> Path:
    """``benchmarks/run.py`` next to the package (a source checkout or editable install)."""
    return Path(__file__).resolve().parents[2] / "benchmarks" / "run.py"


def output_folder(args: argparse.Namespace, script: Path) -> Path:
    """The folder the results go to; a new one unless ``--update-results``."""
    if args.update_results:
        return script.parent / "results"
    if args.output is not None:
        folder = Path(args.output)
    else:
        folder = RESULTS_ROOT / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    if folder.exists():
        raise CommandError(
            f"--output {str(folder)!r} already exists; name a new folder, or pass "
            "--update-results to overwrite the tracked results"
        )
    return folder


def _load_script(script: Path) -> ModuleType:
    if not script.is_file():
        raise CommandError(
            f"bench needs a source checkout, but {script} does not exist; clone the "
            "repository and install it with pip install -e '.[bench]'"
        )
    spec = importlib.util.spec_from_file_location("aioloader_benchmarks_run", script)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has one
        raise CommandError(f"cannot load {script}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(args: argparse.Namespace) -> list[str]:
    """Run the benchmarks; their tables go to stdout as they finish, logs to stderr."""
    script = bench_script()
    module = _load_script(script)
    argv = ["--quick"] if args.quick else []
    if args.rounds is not None:
        argv += ["--rounds", str(args.rounds)]
    if args.workloads is not None:
        known = tuple(module.WORKLOADS)
        chosen = [w.strip().upper() for w in args.workloads.split(",") if w.strip()]
        unknown = sorted(set(chosen) - set(known))
        if unknown or not chosen:
            raise CommandError(
                f"--workloads must name some of {', '.join(known)} but got {args.workloads!r}"
            )
        argv += ["--workloads", ",".join(chosen)]
    folder = output_folder(args, script)
    argv += ["--output", str(folder)]
    status: int = module.main(argv)
    if status != 0:
        raise CommandError(f"some benchmark cases failed; see {folder / 'results.md'}")
    return [f"results in {folder}"]
