"""Before and after: aioloader's own rows of W1, W1u and W6 at two revisions, in one run.

Issue 37's target "speed unchanged within noise". ``--before REV`` (default c550951, the
commit before issue 37's first change) is checked out with ``git worktree add --detach`` into
a temporary folder, removed at the end (also on failure); "after" is this working tree. Both
run this tree's benchmark code (``workloads/``, ``harness.py``): only the ``aioloader``
package differs. Every child process gets a ``sitecustomize`` (on ``PYTHONPATH``) that imports
its revision's ``aioloader`` before anything else, so the child, its worker processes and
W6's row processes all use that package (any other stops at once); each child reports
``aioloader.__file__`` and the parent checks it.

The data are made once: W1's samples and W1u's images here, handed to every child as a
pickle of arrays; W6's JPEGs and shards uploaded once to one SeaweedFS. Before any timing,
both revisions build every row's first batches and must give the same digest.

Rounds alternate the order (round 1: before, after; round 2: after, before; ...). In each, a
fresh process per revision runs W1's and W1u's aioloader rows (a dropped warm-up measurement,
then a kept one, as ``run.py``), then W6's aioloader rows run once each in their own process
(a cold epoch, as in W6). Writes ``before-after.md`` and ``.json``.

Run: ``python benchmarks/run.py --micro before_after [--before REV] [--rounds 5]
[--workloads W1,W1U,W6] [--quick] [--output DIR]``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
for _path in (BENCH, ROOT):  # harness, workloads, systems; tests._support (W6's server)
    if str(_path) not in sys.path:
        sys.path.append(str(_path))

import harness  # noqa: E402
import report  # noqa: E402

from . import _before_after_child as child_side  # noqa: E402
from ._before_after_report import LABELS, markdown, summary  # noqa: E402

WORKLOADS = ("W1", "W1U", "W6")
IN_MEMORY = ("W1", "W1U")  # their rows run in one child per round and revision
DEFAULT_BEFORE = "c550951"  # the commit before issue 37's first change
CHILD_TIMEOUT = 3600.0
SHIM = '''"""Imports aioloader from {tree!r} first (benchmarks/micro/before_after.py wrote this)."""
import os
import sys

sys.path.insert(0, {tree!r})
try:
    import aioloader

    _where = os.path.realpath(os.path.dirname(aioloader.__file__))
    _pinned = _where == os.path.realpath(os.path.join({tree!r}, "aioloader"))
except BaseException as error:  # noqa: BLE001
    _pinned, aioloader = False, error
sys.path.remove({tree!r})
if not _pinned:
    print(f"before_after: aioloader is not the one of {tree!r}: {{aioloader!r}}", file=sys.stderr)
    os._exit(3)
'''


@dataclasses.dataclass
class Row:
    """One aioloader row: its kept values per revision, in round order, and any failure."""

    workload: str
    system: str
    metric: str
    values: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    errors: dict[str, str] = dataclasses.field(default_factory=dict)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)  # all rounds, with setup


# -- the parent: the two trees, the check, the rounds ----------------------------------------
def git(*words: str) -> str:
    """``git words`` in this repository: its output, stripped (raises when git fails)."""
    done = subprocess.run(["git", "-C", str(ROOT), *words], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"git {' '.join(words)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


@contextlib.contextmanager
def worktree(commit: str, folder: Path) -> Iterator[Path]:
    """A detached ``git worktree`` of ``commit`` at ``folder``, removed on the way out."""
    git("worktree", "add", "--detach", "--quiet", str(folder), commit)
    try:
        yield folder
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(folder)])


def child_env(tree: Path, folder: Path) -> dict[str, str]:
    """``PYTHONPATH`` for a child pinned to ``tree``'s aioloader (a ``sitecustomize`` there)."""
    folder.mkdir(parents=True)
    (folder / "sitecustomize.py").write_text(SHIM.format(tree=str(tree)), encoding="utf-8")
    paths = [str(folder), str(ROOT), str(BENCH), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def run_child(env: dict[str, str], tree: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """One child with ``env``; checks it used ``tree``'s aioloader; returns its result."""
    command = [sys.executable, "-m", "benchmarks.micro._before_after_child", json.dumps(spec)]
    result, timed_out, code = harness.run_child(command, env, ROOT, CHILD_TIMEOUT, lambda _: None)
    if result is None:
        raise RuntimeError(
            f"a child ended with code {code}" + (" (timed out)" if timed_out else "")
        )
    if Path(result["aioloader"]).resolve().parent != (tree / "aioloader").resolve():
        raise RuntimeError(f"a child imported {result['aioloader']}, not {tree}'s aioloader")
    return result


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """``os.environ`` updated with ``env`` for a while (W6's row processes inherit it)."""
    old = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def w6_cases(quick: bool, log: harness.Log, stack: contextlib.ExitStack) -> list[harness.Case]:
    """W6's aioloader rows (data uploaded once, the server and relay on ``stack``)."""
    from workloads import w6_object_storage

    found, _ = w6_object_storage.build(quick, log, stack, None)
    if not found:
        raise RuntimeError("W6 cannot run here (SeaweedFS, Pillow or obstore is missing)")
    return [c for c in found if c.group == "aioloader" and c.error is None]


def w6_spec(case: harness.Case) -> dict[str, Any]:
    """The spec W6 hands the row's process (held by ``case.measure``)."""
    spec = inspect.getclosurevars(case.measure).nonlocals.get("spec")
    if not isinstance(spec, dict):
        raise TypeError(f"W6 {case.system}: its measure holds no spec dict but {spec!r}")
    return spec


def check(
    trees: dict[str, Path], envs: dict[str, dict[str, str]], spec: dict[str, Any], log: harness.Log
) -> dict[str, Any]:
    """Both revisions' digests of every row's first batches; raises where they differ."""
    found = {}
    for label in LABELS:
        log(f"checking the batches of {label} ({trees[label]})")
        found[label] = run_child(envs[label], trees[label], {**spec, "check": True})
        log(f"  {label}: {found[label]['aioloader']}, kernels: {found[label]['kernels']}")
    digests = [found[label]["digests"] for label in LABELS]
    differ = sorted(
        k for k in digests[0].keys() | digests[1].keys() if digests[0].get(k) != digests[1].get(k)
    )
    if differ:
        raise RuntimeError(f"the revisions give different batches in {differ}")
    return {
        "kernels": {label: found[label]["kernels"] for label in LABELS},
        "files": {label: found[label]["aioloader"] for label in LABELS},
        "digests": digests[1],
    }


def one_round(
    label: str,
    trees: dict[str, Path],
    envs: dict[str, dict[str, str]],
    spec: dict[str, Any],
    w6: Sequence[harness.Case],
    rows: dict[tuple[str, str], Row],
) -> None:
    """Revision ``label``'s round: W1 and W1u in a child, then each W6 row in its own."""
    found = []
    if spec["data_workloads"]:
        result = run_child(envs[label], trees[label], {**spec, "check": False})
        found += result["rows"]
    for case in w6:
        started, value, error = time.perf_counter(), None, None
        with environment(envs[label]):
            try:
                value = case.measure()
            except Exception as failure:  # a row that breaks is reported, not fatal
                error = f"{type(failure).__name__}: {failure}"
        found.append(
            [case.workload, case.system, case.metric, value, error, time.perf_counter() - started]
        )
    for workload, system, metric, value, error, seconds in found:
        row = rows.setdefault((workload, system), Row(workload, system, metric))
        if value is not None:
            row.values.setdefault(label, []).append(value)
        if error is not None:
            row.errors[label] = error
        row.seconds[label] = row.seconds.get(label, 0.0) + seconds


def order(round_index: int) -> tuple[str, ...]:
    """Round ``round_index`` (from 0): before then after, then the other way, and so on."""
    return LABELS if round_index % 2 == 0 else LABELS[::-1]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py --micro before_after",
        description="aioloader's rows of W1, W1u and W6 at two revisions, interleaved.",
    )
    parser.add_argument(
        "--before",
        default=DEFAULT_BEFORE,
        metavar="REV",
        help=f"the revision (default {DEFAULT_BEFORE})",
    )
    parser.add_argument("--rounds", type=int, metavar="N", help="rounds (default 5, quick 1)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round (smoke)")
    parser.add_argument(
        "--workloads", default=",".join(WORKLOADS), metavar="LIST", help="some of W1,W1U,W6 (all)"
    )
    parser.add_argument(
        "--output", type=Path, default=BENCH / "results", metavar="DIR", help="results folder"
    )
    args = parser.parse_args(argv)
    chosen = [w.strip().upper() for w in args.workloads.split(",") if w.strip()]
    if not chosen or set(chosen) - set(WORKLOADS):
        parser.error(
            f"--workloads must name some of {','.join(WORKLOADS)} but got {args.workloads!r}"
        )
    args.workloads = [w for w in WORKLOADS if w in chosen]
    if args.rounds is None:
        args.rounds = 1 if args.quick else 5
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1 but got {args.rounds}")
    try:
        args.commit = git("rev-parse", "--verify", "--quiet", f"{args.before}^{{commit}}")
    except RuntimeError:
        parser.error(f"--before must name a commit of this repository but got {args.before!r}")
    return args


def revisions(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """What "before" and "after" are: commits, subject, uncommitted changes of the package."""
    dirty = git("status", "--porcelain", "--", "aioloader")
    changes = " with uncommitted changes under aioloader/" if dirty else " (aioloader/ committed)"
    return {
        "before": {
            "revision": args.before,
            "commit": args.commit,
            "subject": git("log", "-1", "--format=%s", args.commit),
        },
        "after": {"commit": git("rev-parse", "HEAD"), "changes": changes},
    }


def compare(args: argparse.Namespace, log: harness.Log) -> tuple[list[Row], dict[str, Any]]:
    """Set up both trees and the data, check the batches, run the rounds: the rows and what
    the check found."""
    data_workloads = [w for w in args.workloads if w in IN_MEMORY]
    rows: dict[tuple[str, str], Row] = {}
    with contextlib.ExitStack() as stack:  # the folder, the worktree, W6's server and relay
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="aioloader-ba-")))
        trees = {"before": stack.enter_context(worktree(args.commit, folder / "before"))}
        trees["after"] = ROOT
        envs = {label: child_env(tree, folder / f"shim-{label}") for label, tree in trees.items()}
        data = folder / "data.pickle"
        data.write_bytes(pickle.dumps(child_side.make_data(data_workloads, args.quick)))
        w6 = w6_cases(args.quick, log, stack) if "W6" in args.workloads else []
        spec = {"quick": args.quick, "data": str(data), "data_workloads": data_workloads}
        checked = check(trees, envs, {**spec, "w6": {c.system: w6_spec(c) for c in w6}}, log)
        for index in range(args.rounds):
            for label in order(index):
                started = time.perf_counter()
                one_round(label, trees, envs, spec, w6, rows)
                seconds = time.perf_counter() - started
                log(f"round {index + 1}/{args.rounds}, {label}: {seconds:.1f} s")
    return list(rows.values()), checked


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    facts, started = report.machine_facts(), time.perf_counter()
    settings: dict[str, Any] = {
        "command": "python benchmarks/run.py --micro before_after " + " ".join(sys.argv[1:]),
        "rounds": args.rounds,
        "quick": args.quick,
        "workloads": args.workloads,
        **revisions(args),
    }
    rows, checked = compare(args, log)
    facts["load_average_end"] = report.load_average()
    settings["seconds"] = round(time.perf_counter() - started, 1)
    settings["kernels"] = ", ".join(f"{k} {v}" for k, v in checked["kernels"].items())
    settings["aioloader"] = checked["files"]
    data = {
        "machine": facts,
        "settings": settings,
        "checked": ", ".join(sorted({k.split(" ", 1)[0] for k in checked["digests"]})),
        "digests": checked["digests"],
        "rows": [
            {
                **dataclasses.asdict(row),
                "summary": summary(row.values.get("before", []), row.values.get("after", [])),
            }
            for row in rows
        ],
    }
    args.output.mkdir(parents=True, exist_ok=True)
    text = markdown(data)
    (args.output / "before-after.json").write_text(
        json.dumps(data, indent=2) + "\n", encoding="utf-8"
    )
    (args.output / "before-after.md").write_text(text, encoding="utf-8")
    print(text)
    log(f"wrote {args.output}/before-after.md and .json in {settings['seconds']:.0f} s")
    return 1 if any(row.errors for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
