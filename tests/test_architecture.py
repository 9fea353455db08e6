"""The house rules of DESIGN.md: import direction, lint and types."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "aioloader"
LINTED = [
    name for name in ("aioloader", "tests", "benchmarks", "examples") if (ROOT / name).is_dir()
]

FORBIDDEN = {
    "core": {
        "aioloader.engine",
        "aioloader.sources",
        "aioloader.interop",
        "anyio",
        "aiofiles",
        "obstore",
        "torch",
        "trio",
        "sniffio",
        "jax",
    },
    "engine": {"aioloader.sources", "aioloader.interop", "torch", "obstore", "aiofiles"},
    "sources": {"aioloader.engine", "aioloader.interop"},
    "sinks": {"aioloader.engine", "aioloader.interop"},
    "ingest": {"aioloader.engine", "aioloader.interop"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.add(module)
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_import_direction(layer: str) -> None:
    offending = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for name in _imports(path):
            for banned in FORBIDDEN[layer]:
                if name == banned or name.startswith(banned + "."):
                    offending.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offending == []


def _tool(name: str) -> str:
    found = Path(sys.executable).parent / name
    if found.exists():
        return str(found)
    located = shutil.which(name)
    assert located is not None, f"{name} is not installed (it is part of the test extra)"
    return located


def test_ruff_is_clean() -> None:
    result = subprocess.run(
        [_tool("ruff"), "check", *LINTED],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = subprocess.run(
        [_tool("ruff"), "format", "--check", *LINTED],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow  # mypy reads torch and jax stubs: minutes
def test_mypy_strict_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "aioloader", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
