"""Every chosen workload on every system here, interleaved; writes ``results.md``, ``.json``
and ``.png`` (``w7.md``, ... for one workload alone) to benchmarks/results/ or ``--output``.

Run ``python benchmarks/run.py`` or ``aioloader bench``; docs/benchmarks.md has the workloads.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
for _path in (HERE, HERE.parent):  # benchmark modules, and tests._support for the S3 server
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import harness  # noqa: E402
import micro  # noqa: E402
import report  # noqa: E402
import workloads  # noqa: E402

WORKLOADS = tuple(workloads.MODULES)
OPT_IN = workloads.OPT_IN  # run only when named


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py",
        description="Run every benchmark workload, interleaved, and write the results.",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round (smoke)")
    parser.add_argument("--rounds", type=int, help="kept rounds (default 7, quick 1)")
    parser.add_argument("--w8-images", type=int, help="W8's dataset size (default 4,096)")
    w8 = workloads.load("W8")
    parser.add_argument(
        "--w8-shard-samples",
        type=w8.shard_samples_option,
        help="W8's samples per tar shard, comma-separated (default 32,128: both in one run)",
    )
    parser.add_argument(
        "--w8-leave-out",
        type=w8.leave_out_option,
        help=f"W8's peers or cache tiers not to run, comma-separated ({','.join(w8.LEAVE_OUT)})",
    )
    parser.add_argument("--output", type=Path, default=HERE / "results", help="results folder")
    parser.add_argument(
        "--name", help="the results' file name (default: the workload's, or results for several)"
    )
    parser.add_argument(
        "--w9-device",
        default="auto",
        help="W9's device: cuda, cpu (a dry run: tiny model) or auto (cuda where torch sees one)",
    )
    parser.add_argument(
        "--w9-folder", type=Path, help="where W9 writes its JPEGs (default /dev/shm/aioloader-w9)"
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
    parser.add_argument(
        "--micro",
        nargs=argparse.REMAINDER,
        metavar="NAME",
        help="run micro-benchmark NAME instead, with the options after it (NAME --help): "
        + ", ".join(micro.MODULES),
    )
    args = parser.parse_args(argv)
    if args.micro is not None and (not args.micro or args.micro[0] not in micro.MODULES):
        parser.error(f"--micro must name one of {', '.join(micro.MODULES)} but got {args.micro}")
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


def load_kernels(log: harness.Log) -> str:
    """Load the compiled kernels before any row runs, so that no round measures ``auto``'s
    numpy stand-in while a cold cache compiles; says which ran (``AIOLOADER_KERNELS``)."""
    from aioloader.kernels import _selection as _backend

    if _backend.chosen() == "numpy" or _backend.load() is None:
        log("the numpy reference builds every batch (no compiled kernels)")
        return "numpy"
    return "numba"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.micro:
        return micro.run(args.micro)
    harness.use_peer_paths(args.peer_path)

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    os.environ.setdefault("GRAIN_PY_TRACEBACK_FILTERING", "off")
    kernels = load_kernels(log)
    facts = report.machine_facts()
    started = time.perf_counter()
    cases: list[harness.Case] = []
    notes: dict[str, list[str]] = {}
    with contextlib.ExitStack() as stack:  # W2's server and relay live for the whole run
        for name in args.workloads:
            found, notes[name] = workloads.load(name).build(args.quick, log, stack, args)
            cases += found
        log(f"{len(cases)} cases; {args.rounds} rounds after a warm-up round, interleaved")
        harness.run_interleaved(cases, args.rounds, log)
    seconds = time.perf_counter() - started
    facts["load_average_end"] = report.load_average()
    settings = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "rounds": args.rounds,
        "quick": args.quick,
        "workloads": args.workloads,
        "seconds": round(seconds, 1),
        "kernels": kernels,
    }
    targets = []
    for name in dict.fromkeys(c.workload for c in cases):  # the workloads that ran
        module = workloads.load(name)
        if hasattr(module, "targets"):
            targets += module.targets(cases)
    data = report.to_json(cases, facts, settings, targets, notes)
    args.output.mkdir(parents=True, exist_ok=True)
    stem = args.name or (args.workloads[0].lower() if len(args.workloads) == 1 else "results")
    titles = {name: workloads.load(name).TITLE for name in args.workloads}
    markdown = report.to_markdown(data, titles)
    texts = {"json": json.dumps(data, indent=2, default=str) + "\n", "md": markdown}
    for suffix, text in texts.items():
        (args.output / f"{stem}.{suffix}").write_text(text, encoding="utf-8")
    if not report.plot(args.output / f"{stem}.png", data, titles):
        log(f"matplotlib is not installed: no {stem}.png")
    print(markdown)
    log(f"wrote {args.output}/{stem}.md, {stem}.json, {stem}.png in {seconds:.0f} s")
    return 1 if any(c.error for c in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
