"""Every chosen workload on every system here, interleaved; writes benchmarks/results/.

Run: ``python benchmarks/run.py`` (about 6 to 9 minutes on 2 cores) or ``aioloader bench``;
``--quick`` shrinks every workload for a smoke run; ``--workloads W1,W6`` picks some
(W6, W7 and W8 run only when named). The workloads are the modules of
``benchmarks/workloads/`` (registered in its ``MODULES``), the systems the adapters of
``benchmarks/systems/``; docs/benchmarks.md describes each.

Protocol: every case runs once per round, in a fixed order (A B C A B C ...); round 0 warms
up and is dropped. The reports give medians with min-max over the kept rounds and ratios
of medians measured in the same run: ``results.md``, ``results.json``, ``results.png``
(``w7.md``, ... when one workload is named alone).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _path in (HERE, HERE.parent):  # benchmark modules, and tests._support for the S3 server
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import harness  # noqa: E402
import report  # noqa: E402
import workloads  # noqa: E402

WORKLOADS = tuple(workloads.MODULES)
OPT_IN = workloads.OPT_IN


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py",
        description="Run every benchmark workload, interleaved, and write the results.",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round (smoke)")
    parser.add_argument("--rounds", type=int, help="kept rounds (default 7, quick 1)")
    parser.add_argument("--w8-images", type=int, help="W8's dataset size (default 4,096)")
    parser.add_argument(
        "--output", type=Path, default=HERE / "results", help="directory for the results"
    )
    parser.add_argument(
        "--peer-path",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of peers installed with `pip install --target DIR` (img2dataset for "
        f"W7), appended to sys.path here and in child processes; repeatable; "
        f"${harness.PEERS_ENV} works too",
    )
    parser.add_argument(
        "--workloads",
        default=",".join(w for w in WORKLOADS if w not in OPT_IN),
        help=f"comma-separated subset of {','.join(WORKLOADS)} "
        f"({','.join(OPT_IN)} only when named)",
    )
    args = parser.parse_args(argv)
    chosen = [w.strip().upper() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(chosen) - set(WORKLOADS))
    if unknown:
        parser.error(f"--workloads must name {', '.join(WORKLOADS)} but got {unknown}")
    args.workloads = [w for w in WORKLOADS if w in chosen]
    missing = [p for p in args.peer_path if not os.path.isdir(p)]
    if missing:
        parser.error(f"--peer-path must name existing folders but got {missing}")
    if args.rounds is None:
        args.rounds = 1 if args.quick else 7
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1 but got {args.rounds}")
    if args.w8_images is not None and (args.w8_images < 64 or args.w8_images % 64):
        parser.error(f"--w8-images must be a multiple of 64 (the batch) but got {args.w8_images}")
    return args


def build_cases(
    args: argparse.Namespace, log: Any, stack: contextlib.ExitStack
) -> tuple[list[harness.Case], dict[str, list[str]]]:
    """Every chosen workload's cases (its rows on every system here), and its notes."""
    cases: list[harness.Case] = []
    notes: dict[str, list[str]] = {}
    for name in args.workloads:
        found, notes[name] = workloads.load(name).build(args.quick, log, stack, args)
        cases += found
    return cases, notes


def targets(cases: list[harness.Case]) -> list[dict[str, Any]]:
    """Every target of the workloads that ran."""
    out: list[dict[str, Any]] = []
    for name in dict.fromkeys(c.workload for c in cases):
        module = workloads.load(name)
        if hasattr(module, "targets"):
            out += module.targets(cases)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    harness.use_peer_paths(args.peer_path)

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    os.environ.setdefault("GRAIN_PY_TRACEBACK_FILTERING", "off")
    facts = report.machine_facts()
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:  # W2's server and relay live for the whole run
        cases, notes = build_cases(args, log, stack)
        log(f"{len(cases)} cases; {args.rounds} rounds after a warm-up round, interleaved")
        harness.run_interleaved(cases, args.rounds, log)
    seconds = time.perf_counter() - started
    facts["load_average_end"] = report.load_average()
    settings = {
        "command": report.python_command(),
        "rounds": args.rounds,
        "quick": args.quick,
        "workloads": args.workloads,
        "seconds": round(seconds, 1),
    }
    data = report.to_json(cases, facts, settings, targets(cases), notes)
    args.output.mkdir(parents=True, exist_ok=True)
    stem = args.workloads[0].lower() if len(args.workloads) == 1 else "results"
    report.write_json(args.output / f"{stem}.json", data)
    titles = {w: workloads.load(w).TITLE for w in args.workloads}
    markdown = report.to_markdown(data, titles)
    (args.output / f"{stem}.md").write_text(markdown, encoding="utf-8")
    if not report.plot(args.output / f"{stem}.png", data, titles):
        log(f"matplotlib is not installed: no {stem}.png")
    print(markdown)
    log(f"wrote {args.output}/{stem}.md, {stem}.json, {stem}.png in {seconds:.0f} s")
    failed = [c for c in cases if c.error]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
