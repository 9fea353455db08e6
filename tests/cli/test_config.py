"""aioloader.cli._config: JSON and Python configs, and one-line errors for bad ones."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from aioloader.cli._config import add_config_argument, load_factory
from tests.cli.helpers import Fail, Run


def test_json_config_builds_the_described_loader(tmp_path: Path) -> None:
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"count": 40, "batch_size": 8, "sampler": "sequential"}))
    loader = load_factory(str(config))(workers=0, prefetch=2)
    assert loader.steps_per_epoch == 5
    assert load_factory(None)(workers=0, prefetch=2).steps_per_epoch == 16


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"batch": 3}', "keys must be among ['augment', 'batch_size', 'count', 'sampler',"),
        ('{"count": "x"}', "count must be an integer >= 1 but got str ('x')"),
        ('{"seed": true}', "seed must be an integer >= 0 but got a bool (True)"),
        ('{"batch_size": 2.0}', "batch_size must be an integer >= 1 but got float (2.0)"),
        ('{"seed": -1}', "seed must be an integer >= 0 but got -1"),
        ('{"augment": 1}', "augment must be true or false but got 1"),
        ('{"sampler": "random"}', "sampler must be 'shuffled' or 'sequential' but got 'random'"),
        ('{"workload": "tokens"}', "workload must be 'line-images' but got 'tokens'"),
        ('{"count": 4, "batch_size": 8}', "batch_size must be <= count (4) but got 8"),
        ("[1, 2]", "must hold a JSON object but got list"),
        ("{", "is not valid JSON: Expecting property name"),
    ],
)
def test_bad_json_is_one_line_naming_the_file(
    fail: Fail, tmp_path: Path, text: str, message: str
) -> None:
    config = tmp_path / "bad.json"
    config.write_text(text)
    line = fail("digest", str(config))
    assert line.startswith(f"error: config {str(config)!r}")
    assert message in line


def test_bad_python_config(fail: Fail, tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def make_loader(:\n")
    assert fail("tune", str(broken), "--step-ms", "1").startswith(
        f"error: config {str(broken)!r} failed to import: SyntaxError: "
    )
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    assert fail("digest", str(empty)) == (
        f"error: config {str(empty)!r} must define make_loader(*, workers, prefetch)"
    )


def test_missing_or_other_kind_of_file(fail: Fail, tmp_path: Path) -> None:
    missing = str(tmp_path / "none.json")
    assert fail("digest", missing) == (
        f"error: config must be an existing .json or .py file but got {missing!r}"
    )
    other = tmp_path / "c.yaml"
    other.write_text("count: 3\n")
    assert fail("digest", str(other)) == (
        f"error: config must end in .json or .py but got {str(other)!r}"
    )


@pytest.mark.parametrize("command", [["digest"], ["tune", "--step-ms", "1"]])
def test_make_loader_that_returns_no_loader_names_file_function_and_rule(
    fail: Fail, tmp_path: Path, command: list[str]
) -> None:
    config = tmp_path / "answer.py"
    config.write_text("def make_loader(*, workers, prefetch):\n    return 42\n")
    line = fail(command[0], str(config), *command[1:])
    assert line.startswith(f"error: config {str(config)!r}: make_loader(workers=0, prefetch=")
    assert line.endswith(") must return an aioloader DataLoader but returned int 42")


def test_a_long_wrong_return_value_is_cut_short(fail: Fail, tmp_path: Path) -> None:
    config = tmp_path / "listing.py"
    config.write_text("def make_loader(*, workers, prefetch):\n    return list(range(100))\n")
    line = fail("digest", str(config))
    assert line == (
        f"error: config {str(config)!r}: make_loader(workers=0, prefetch=8) must return an "
        "aioloader DataLoader but returned list [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, "
        "14, 15, 16..."
    )


def test_config_argument_is_optional() -> None:
    parser = argparse.ArgumentParser(prog="x")
    add_config_argument(parser)
    assert parser.parse_args([]).config is None
    assert parser.parse_args(["run.json"]).config == "run.json"
    assert parser.format_usage() == "usage: x [-h] [CONFIG]\n"


NEIGHBOUR = "aioloader_test_neighbour_of_a_config"
CONFIG_WITH_A_NEIGHBOUR = f"""
from {NEIGHBOUR} import BATCH, COUNT

from aioloader import DataLoader, SequentialSampler
from aioloader.testing import MemoryDataset, StackCollator


def make_loader(*, workers, prefetch):
    return DataLoader(
        MemoryDataset(list(range(COUNT))),
        SequentialSampler(COUNT, BATCH),
        StackCollator(),
        seed=0,
        workers=workers,
        prefetch=prefetch,
    )
"""


@pytest.mark.parametrize("command", ["digest", "tune"])
def test_a_python_config_imports_a_module_beside_it(run: Run, tmp_path: Path, command: str) -> None:
    (tmp_path / f"{NEIGHBOUR}.py").write_text("COUNT = 16\nBATCH = 4\n")
    config = tmp_path / "with_neighbour.py"
    config.write_text(CONFIG_WITH_A_NEIGHBOUR)
    path = list(sys.path)
    try:
        if command == "digest":
            out = run("digest", str(config), "--stop", "2")
            assert out.endswith("  steps 0..1\n")
        else:
            out = run("tune", str(config), "--step-ms", "15", "--load-ms", "40")
            assert "idealised epoch of 4 batches (the config;" in out  # 16 / 4
    finally:
        sys.modules.pop(NEIGHBOUR, None)
    # before: "failed to import: ModuleNotFoundError: No module named ..."
    assert sys.path == path  # put back as it was
