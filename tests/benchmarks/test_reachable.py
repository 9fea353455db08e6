"""Every module under benchmarks/ is reached from benchmarks/run.py, or backs a cited figure.

Reached: imported (at any depth, at module level or inside a function) from ``run.py``, or
named in a reached package's ``MODULES`` registry (``workloads.MODULES``, the workloads
``--workloads`` picks; ``micro.MODULES``, the micro-benchmarks ``--micro`` runs). A module
that is not reached must back a figure the docs cite: its docstring has a line
``Figure: docs/PAGE.md "TEXT"`` (or ``README.md``), and that file holds TEXT.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURE = re.compile(r'^\s*Figure: ((?:docs/[\w.-]+|README)\.md) "([^"]+)"', re.MULTILINE)


def _modules(bench: Path) -> list[Path]:
    return sorted(p for p in bench.rglob("*.py") if not any(s.startswith(".") for s in p.parts))


def _find(name: str, level: int, here: Path, bench: Path) -> list[Path]:
    """The files that ``import name`` (``level`` dots) in ``here`` loads: the module and
    the packages above it, each ``__init__.py``."""
    parts = name.split(".") if name else []
    if level:
        bases = [here.parents[level - 1]]
    else:
        if parts[:1] == ["benchmarks"]:
            parts = parts[1:]
        bases = [bench, here.parent]  # run.py's sys.path, and a script's own folder
    for base in bases:
        found, folder = [], base
        for part in parts[:-1]:
            folder = folder / part
            found.append(folder / "__init__.py")
        last = folder / parts[-1] if parts else folder
        for candidate in (last.with_suffix(".py"), last / "__init__.py"):
            if candidate.is_file() and all(p.is_file() for p in found):
                return [*found, candidate]
    return []


def _registry(tree: ast.Module) -> list[str]:
    """The strings of a module-level ``MODULES`` (a dict's values or a tuple's items)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "MODULES" for t in node.targets
        ):
            value = node.value
            items = value.values if isinstance(value, ast.Dict) else getattr(value, "elts", [])
            return [
                i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)
            ]
    return []


def _imports(path: Path, bench: Path) -> set[Path]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[Path] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.update(_find(alias.name, 0, path, bench))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            found.update(_find(base, node.level, path, bench))
            for alias in node.names:  # ``from package import module``
                found.update(_find(f"{base}.{alias.name}".lstrip("."), node.level, path, bench))
    if path.name == "__init__.py":
        for item in _registry(tree):
            found.update(_find(item, 1, path, bench))
    return found


def reached(bench: Path) -> set[Path]:
    """The modules under ``bench`` that ``bench/run.py`` reaches."""
    seen: set[Path] = set()
    todo = [bench / "run.py"]
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += _imports(path, bench)
    return seen


def unaccounted(root: Path) -> list[str]:
    """The modules under ``root/benchmarks`` neither reached nor backing a cited figure."""
    bench = root / "benchmarks"
    found = reached(bench)
    bad = []
    for path in _modules(bench):
        if path in found:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        figures = FIGURE.findall(doc)
        if not any(
            (root / page).is_file() and text in (root / page).read_text(encoding="utf-8")
            for page, text in figures
        ):
            bad.append(path.relative_to(root).as_posix())
    return bad


def test_every_benchmark_module_is_reached_from_run_py_or_backs_a_cited_figure() -> None:
    assert unaccounted(ROOT) == []


def test_the_walk_follows_imports_and_registries() -> None:
    found = {p.relative_to(ROOT).as_posix() for p in reached(ROOT / "benchmarks")}
    assert {
        "benchmarks/harness.py",
        "benchmarks/workloads/w5j_chain.py",  # workloads.MODULES
        "benchmarks/micro/bench_core.py",  # micro.MODULES
        "benchmarks/micro/_common.py",  # from benchmarks.micro._common import ...
        "benchmarks/micro/_ingest_common.py",  # import _ingest_common (the script's folder)
        "benchmarks/systems/s3spec.py",  # from systems.s3spec import ...
    } <= found


def _tree(root: Path, stray: str) -> None:
    (root / "benchmarks" / "micro").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "docs" / "page.md").write_text("Figure 3: 812 batches/s on 2 cores.\n")
    (root / "benchmarks" / "run.py").write_text("import micro\n")
    (root / "benchmarks" / "micro" / "__init__.py").write_text('MODULES = ("used",)\n')
    (root / "benchmarks" / "micro" / "used.py").write_text('"""Used."""\nfrom . import _util\n')
    (root / "benchmarks" / "micro" / "_util.py").write_text('"""Shared."""\n')
    (root / "benchmarks" / "micro" / "stray.py").write_text(f'"""A study.\n\n{stray}\n"""\n')


def test_a_module_neither_reached_nor_backing_a_figure_is_named(tmp_path: Path) -> None:
    _tree(tmp_path / "named", 'Figure: docs/page.md "812 batches/s on 2 cores"')
    assert unaccounted(tmp_path / "named") == []
    _tree(tmp_path / "gone", 'Figure: docs/page.md "900 batches/s on 2 cores"')
    assert unaccounted(tmp_path / "gone") == ["benchmarks/micro/stray.py"]
    _tree(tmp_path / "nopage", 'Figure: docs/other.md "812 batches/s on 2 cores"')
    assert unaccounted(tmp_path / "nopage") == ["benchmarks/micro/stray.py"]
    _tree(tmp_path / "silent", "No figure.")
    assert unaccounted(tmp_path / "silent") == ["benchmarks/micro/stray.py"]
