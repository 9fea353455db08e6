"""The house rules of docs/architecture.md: layers, faces, a pure core, no cycles, lint, types.

Faces: a module of the package imports another unit through that unit's package
(``from ..sinks import TarShardWriter``), never through one of its private modules (a path
part that starts with ``_`` below the unit: ``from ..sinks._tar_writer import ...``). Inside
a unit, its modules import each other freely. ``tests/`` and ``benchmarks/`` are not
checked: white-box tests may import the private modules they test.
"""

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

# The layers of the package, lowest first (docs/architecture.md draws them). A unit (a
# sub-package or a top-level module) may import its own modules and the units of lower
# layers, never a unit of its own layer or of a higher one.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_compat", "_errors", "_event_loops"),  # no domain: versions, errors, event loops
    ("_files", "_progress", "_ordered"),  # no domain: files in pieces, progress, ordered map
    ("core",),  # pure: rng, samplers, plans, collation, pool
    ("_protocols", "kernels"),  # kernels: compiling, caching, choosing the batch kernels
    ("engine", "sources", "datasets"),
    ("sinks", "interop", "testing"),
    ("ingest",),
    ("cli",),
    ("__init__", "__main__"),  # the public facade and ``python -m aioloader``
)

# Packages a layer must not import (core stays pure; engine stays portable). The core does
# no I/O and starts no thread or process: no process or thread machinery, no sockets or
# file locks, no raw memory, no numba (compiling and loading kernels is ``kernels/``).
FORBIDDEN = {
    "core": {"anyio", "aiofiles", "obstore", "torch", "trio", "sniffio", "jax"}
    | {"asyncio", "concurrent", "subprocess", "multiprocessing", "_thread", "socket"}
    | {"selectors", "fcntl", "tempfile", "shutil", "atexit", "mmap", "ctypes", "io"}
    | {"numba", "llvmlite", "aioloader.kernels"},
    "engine": {"torch", "obstore", "aiofiles"},
}

# The units the library is made of: everything but the command line and the facades.
COMMAND_LINE = {"cli", "__main__"}
LIBRARY = {unit for layer in LAYERS for unit in layer} - COMMAND_LINE - {"__init__"}


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, wherever the import stands (``TYPE_CHECKING`` too).

    ``from package import name`` counts as importing ``package.name`` where that is a module
    (the package's own ``__init__`` otherwise).
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module_name(path).rpartition(".")[0]
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
            for alias in node.names:
                child = ROOT.joinpath(*module.split("."), alias.name)
                if child.with_suffix(".py").is_file() or (child / "__init__.py").is_file():
                    names.add(f"{module}.{alias.name}")
                else:
                    names.add(module)
    return names


def _unit(module: str) -> str:
    """``aioloader.engine._work`` -> ``engine``; ``aioloader`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _layer_of(unit: str) -> int:
    for rank, units in enumerate(LAYERS):
        if unit in units:
            return rank
    raise AssertionError(f"aioloader.{unit} has no place in LAYERS; add it there")


def _package_modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _module_name(path)
        modules[name.removesuffix(".__init__")] = path
    return modules


def test_every_unit_has_a_layer() -> None:
    units = {_unit(name) for name in _package_modules()}
    placed = {unit for layer in LAYERS for unit in layer}
    assert units - placed == set()
    assert placed - units == set()


def test_imports_only_go_down_the_layers() -> None:
    offending = []
    for name, path in _package_modules().items():
        unit = _unit(name)
        rank = _layer_of(unit)
        for imported in _imports(path):
            if imported != "aioloader" and not imported.startswith("aioloader."):
                continue
            target = _unit(imported)
            if target != unit and _layer_of(target) >= rank:
                offending.append(f"{path.relative_to(ROOT)} imports {imported}")
    assert offending == []


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_import_direction(layer: str) -> None:
    offending = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for name in _imports(path):
            for banned in FORBIDDEN[layer]:
                if name == banned or name.startswith(banned + "."):
                    offending.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offending == []


# What the core may not call: file I/O (``open``, ``os``'s file and process calls, a
# path's readers and writers) and thread starts. ``threading`` itself is allowed for its
# locks (a pool and a sampler are shared by build threads); ``Thread`` and ``Timer`` are not.
CORE_FORBIDDEN_CALLS = {"open", "Thread", "Timer", "start_new_thread", "fork", "system"}
CORE_FORBIDDEN_CALLS |= {"popen", "spawnv", "execv", "read_text", "read_bytes", "write_text"}
CORE_FORBIDDEN_CALLS |= {"write_bytes", "touch", "unlink", "mkdir", "makedirs", "remove"}
CORE_FORBIDDEN_CALLS |= {"rename", "replace_file", "listdir", "scandir", "iterdir", "glob"}
CORE_FORBIDDEN_CALLS |= {"lockf", "flock", "run_sync", "to_thread", "submit"}


def _forbidden_calls(path: Path, root: Path = ROOT) -> list[str]:
    """The calls in ``path`` whose name (``f(...)`` or ``x.f(...)``) is forbidden in core."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{path.relative_to(root)}:{node.lineno} calls {name}()"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for name in [getattr(node.func, "id", None) or getattr(node.func, "attr", "")]
        if name in CORE_FORBIDDEN_CALLS
    ]


def test_the_core_does_no_io_and_starts_no_thread_or_process() -> None:
    """Checked statically: no module of ``core/`` calls what reads or writes files or
    starts a thread or process (its imports are checked by ``test_import_direction``)."""
    offending = [
        found
        for path in sorted((PACKAGE / "core").rglob("*.py"))
        for found in _forbidden_calls(path)
    ]
    assert offending == []


def test_the_core_checks_would_catch_a_thread_and_a_file(tmp_path: Path) -> None:
    module = tmp_path / "aioloader" / "core" / "_bad.py"
    module.parent.mkdir(parents=True)
    module.write_text("import threading\nthreading.Thread(target=print).start()\nopen('x')\n")
    found = sorted(line.split(":", 1)[1] for line in _forbidden_calls(module, tmp_path))
    assert found == ["2 calls Thread()", "3 calls open()"]


def _private_reach(importer: str, imported: str) -> bool:
    """Whether ``importer`` imports another unit's private module (``aioloader.u._m``)."""
    if not imported.startswith("aioloader."):
        return False
    parts = imported.split(".")
    return _unit(imported) != _unit(importer) and any(p.startswith("_") for p in parts[2:])


def test_private_reach_is_told_from_a_face() -> None:
    assert _private_reach("aioloader.ingest._pipeline", "aioloader.sinks._manifest")
    assert _private_reach("aioloader.cli._demo", "aioloader.engine._loader")
    assert _private_reach("aioloader.sinks._tar_writer", "aioloader.sources._tar_index")
    assert not _private_reach("aioloader.ingest._pipeline", "aioloader.sinks")
    assert not _private_reach("aioloader.engine._work", "aioloader.engine._ring")
    assert not _private_reach("aioloader.cli._demo", "aioloader._errors")
    assert not _private_reach("aioloader.__init__", "aioloader.interop.torch")


def test_units_meet_through_their_faces() -> None:
    """No module imports another unit's private module, only that unit's package."""
    offending = [
        f"{path.relative_to(ROOT)} imports {imported}"
        for name, path in _package_modules().items()
        for imported in sorted(_imports(path))
        if _private_reach(name, imported)
    ]
    assert offending == []


# The event-loop libraries, spoken to by ``aioloader/_event_loops.py`` alone (as anyio keeps
# its ``_backends``): every other module calls that module's operations, so what the package
# does differently on asyncio and on trio is read in one place. No exception is listed.
EVENT_LOOP_LIBRARIES = frozenset({"asyncio", "trio", "sniffio", "uvloop"})
EVENT_LOOPS_MODULE = "aioloader._event_loops"
EVENT_LOOP_EXCEPTIONS: frozenset[str] = frozenset()


def _event_loop_imports(tree: ast.AST) -> list[str]:
    """The event-loop libraries ``tree`` imports, wherever the import stands."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        found += [name for name in names if name.split(".")[0] in EVENT_LOOP_LIBRARIES]
    return found


def test_the_event_loop_check_finds_every_form_of_import() -> None:
    source = (
        "import asyncio.events\nfrom trio import lowlevel\nimport anyio\n"
        "def f():\n    import sniffio, uvloop\n    from . import trio\n"
    )
    assert _event_loop_imports(ast.parse(source)) == [
        "asyncio.events",
        "trio",
        "sniffio",
        "uvloop",
    ]


def test_only_the_event_loops_module_speaks_to_the_event_loop_libraries() -> None:
    offending = [
        f"{path.relative_to(ROOT)} imports {imported}"
        for name, path in _package_modules().items()
        if name != EVENT_LOOPS_MODULE and name not in EVENT_LOOP_EXCEPTIONS
        for imported in _event_loop_imports(ast.parse(path.read_text(), filename=str(path)))
    ]
    assert offending == []
    assert _event_loop_imports(ast.parse((PACKAGE / "_event_loops.py").read_text()))


def test_command_line_parsing_lives_in_cli() -> None:
    """argparse (and so every option and argument type) is imported by ``cli/`` alone."""
    offending = []
    for name, path in _package_modules().items():
        if _unit(name) in COMMAND_LINE:
            continue
        for imported in _imports(path):
            if imported == "argparse" or imported.startswith("argparse."):
                offending.append(f"{path.relative_to(ROOT)} imports {imported}")
    assert offending == []


def test_every_helper_of_no_domain_serves_the_library() -> None:
    """A ground-floor module that only the command line imports belongs in ``cli/``."""
    importers: dict[str, set[str]] = {unit: set() for unit in LAYERS[0] + LAYERS[1]}
    for name, path in _package_modules().items():
        for imported in _imports(path):
            target = _unit(imported) if imported.startswith("aioloader.") else ""
            if target in importers and _unit(name) != target:
                importers[target].add(_unit(name))
    only_the_command_line = {
        f"aioloader.{unit} (imported by {sorted(users)})"
        for unit, users in importers.items()
        if not users & LIBRARY
    }
    assert only_the_command_line == set()


def test_the_library_never_imports_the_test_doubles() -> None:
    """``aioloader.testing`` is for users' tests: no module of the package imports it."""
    offending = [
        f"{path.relative_to(ROOT)} imports {imported}"
        for name, path in _package_modules().items()
        if _unit(name) != "testing"
        for imported in _imports(path)
        if imported == "aioloader.testing"
    ]
    assert offending == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for edge in edges:
                if edge not in index:
                    index[edge] = low[edge] = len(index)
                    stack.append(edge)
                    on_stack.add(edge)
                    work.append((edge, iter(sorted(graph[edge]))))
                    break
                if edge in on_stack:
                    low[node] = min(low[node], index[edge])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles_not_even_type_only() -> None:
    modules = _package_modules()
    graph = {
        name: {imported for imported in _imports(path) if imported in modules} - {name}
        for name, path in modules.items()
    }
    assert _cycles(graph) == []


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
@pytest.mark.timeout(1800)
def test_mypy_strict_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "aioloader", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
