"""Every file under benchmarks/results/ names the command that produced it, and that command
still runs here: the script exists and takes every option the command gives it.

A file's command is its Markdown twin's first ``Command: `...` `` line (``w7.md`` for
``w7.json`` and ``w7.png``), else the JSON's ``command`` (or ``settings.command``).
"""

from __future__ import annotations

import functools
import importlib
import itertools
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
COMMAND = re.compile(r"^Command: `([^`]+)`", re.MULTILINE)
FOLDERS = ("--output", "--peer-path", "--w9-folder")  # the run's machine's folders


def _module(name: str) -> ModuleType:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module(name)


def command_of(stem: str) -> str | None:
    """The command recorded for the results named ``stem``, or None."""
    markdown, data = RESULTS / f"{stem}.md", RESULTS / f"{stem}.json"
    if markdown.is_file():
        found = COMMAND.search(markdown.read_text(encoding="utf-8"))
        return found.group(1) if found else None
    if data.is_file():
        loaded = json.loads(data.read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            settings = loaded.get("settings")
            command = loaded.get("command") or (settings or {}).get("command")
            return command if isinstance(command, str) else None
    return None


@functools.cache
def _help(module: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--micro", module, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def problem(command: str, here: Path) -> str | None:
    """Why ``command`` could not run with today's benchmarks, or None when it can."""
    words = shlex.split(command)
    while words and re.fullmatch(r"[A-Z_0-9]+=\S*", words[0]):
        words.pop(0)  # PYTHON=... W9_DEVICE=...
    program, *rest = words
    if program == "bash":
        return None if (ROOT / rest[0]).is_file() else f"no script {rest[0]}"
    if Path(program).name not in ("python", "python3"):
        return f"not a python or bash command: {program}"
    if rest[0] == "-m":
        micro, options = rest[1].removeprefix("benchmarks.micro."), rest[2:]
    elif rest[0] == "benchmarks/run.py":
        pairs = itertools.pairwise(rest)  # each word after the script, and the one before
        options = [str(here) if before in FOLDERS else word for before, word in pairs]
        try:
            _module("run").parse_args(options)
        except SystemExit:
            return f"run.py refuses {options}"
        return None
    else:
        micro, options = Path(rest[0]).stem, rest[1:]
        if Path(rest[0]).parent != Path("benchmarks/micro"):
            return f"not a benchmark script: {rest[0]}"
    if micro not in _module("micro").MODULES:
        return f"no micro-benchmark {micro}"
    given = [w.split("=")[0] for w in options if w.startswith("--")]
    unknown = [w for w in given if not re.search(re.escape(w) + r"(?![\w-])", _help(micro))]
    return f"{micro} has no option {unknown}" if unknown else None


def _stems() -> list[str]:
    return sorted({p.name.split(".")[0] for p in RESULTS.iterdir() if p.is_file()})


@pytest.mark.parametrize("stem", _stems())
def test_each_results_file_names_a_command_that_still_runs(stem: str, tmp_path: Path) -> None:
    command = command_of(stem)
    assert command is not None, f"benchmarks/results/{stem}.*: no Command in its header"
    assert problem(command, tmp_path) is None


def test_a_command_that_cannot_run_any_more_is_named(tmp_path: Path) -> None:
    assert problem("python benchmarks/soak_ingest.py --urls 10", tmp_path) == (
        "not a benchmark script: benchmarks/soak_ingest.py"
    )
    assert problem("python benchmarks/micro/gone.py", tmp_path) == "no micro-benchmark gone"
    assert problem("python -m benchmarks.micro.bench_core --steps 3", tmp_path) == (
        "bench_core has no option ['--steps']"
    )
    assert problem("python benchmarks/run.py --workloads W99", tmp_path) == (
        "run.py refuses ['--workloads', 'W99']"
    )
    assert problem("bash benchmarks/device/w1.sh", tmp_path) == "no script benchmarks/device/w1.sh"
    assert problem("python -m benchmarks.micro.bench_core --rounds 2", tmp_path) is None
    assert problem("OUT=/x bash benchmarks/device/w9.sh", tmp_path) is None
