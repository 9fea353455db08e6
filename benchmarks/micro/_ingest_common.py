"""What the ingestion scripts (soak, trickle, memory) share: the server, RSS, the report."""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SEED = 7
ERROR_RATE = 0.02
# The soak's server: 32 x 32 JPEGs, 2 % of the URLs failing by a hash of the path.
SOAK_SERVER = ["--error-rate", str(ERROR_RATE), "--seed", str(SEED), "--image-size", "32", "32"]
FIGURES = ["| figure | value | target |", "|---|---|---|"]


@contextlib.contextmanager
def http_server(*args: str) -> Iterator[str]:
    """``tests/_support/http_server.py`` with ``args`` in its own process; yields its base URL."""
    command = [sys.executable, "-m", "tests._support.http_server", *args]
    server = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    assert server.stdin is not None
    assert server.stdout is not None
    try:
        yield server.stdout.readline().strip()
    finally:
        server.stdin.close()
        server.wait(timeout=60)
        server.stdout.close()


def rss_mib(pid: int | str = "self") -> float:
    """``VmRSS`` of process ``pid`` in MiB (0 once it has gone)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def met(ok: bool) -> str:
    return "met" if ok else "not met"


def report(title: str, context: str, rows: list[tuple[str, ...]], head: list[str] = FIGURES) -> str:
    """A dated Markdown report: a line of context, then the table of ``rows``."""
    lines = [f"## {title} ({time.strftime('%Y-%m-%d')})", "", context, "", *head]
    lines += [f"| {' | '.join(row)} |".replace("|  |", "| |") for row in rows]  # "" is "| |"
    return "\n".join(lines) + "\n"


def parser(doc: str, urls: int) -> argparse.ArgumentParser:
    """The options every script takes: ``--urls`` and ``--results``."""
    options = argparse.ArgumentParser(description=doc.splitlines()[0])
    options.add_argument("--urls", type=int, default=urls)
    options.add_argument("--results", help="append the Markdown table to this file")
    return options


def command_line(script: str, argv: list[str] | None) -> str:
    return f"python benchmarks/micro/{script} {' '.join(argv or sys.argv[1:])}".strip()


def publish(
    text: str, args: argparse.Namespace, figures: Any = None, indent: int | None = None
) -> None:
    """Print the report, append it to ``--results``, write ``figures`` to ``--json``."""
    print(text)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as handle:
            handle.write("\n" + text)
    if getattr(args, "json", None):
        Path(args.json).write_text(json.dumps(figures, indent=indent))
