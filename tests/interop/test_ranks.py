"""aioloader.interop._ranks: where the rank comes from, in which order, and bad values."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from aioloader.core import SequentialSampler
from aioloader.core._sharding import RankSlice
from aioloader.interop._ranks import RankInfo, rank_slice, resolve_rank

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def process_group(tmp_path: Path) -> Iterator[None]:
    """A real one-process gloo group (rank 0 of 1), torn down after the test."""
    store = dist.FileStore(str(tmp_path / "store"), 1)  # type: ignore[attr-defined]
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_explicit_arguments() -> None:
    assert resolve_rank(3, 4) == RankInfo(3, 4)
    rank, world_size = resolve_rank(0, 1)
    assert (rank, world_size) == (0, 1)


def test_explicit_arguments_win_over_the_environment() -> None:
    assert resolve_rank(1, 2, environ={"RANK": "5", "WORLD_SIZE": "8"}) == (1, 2)


@pytest.mark.usefixtures("process_group")
def test_explicit_arguments_win_over_the_process_group() -> None:
    assert resolve_rank(2, 3) == (2, 3)


@pytest.mark.usefixtures("process_group")
def test_process_group_wins_over_the_environment() -> None:
    assert dist.is_initialized()
    assert resolve_rank(environ={"RANK": "5", "WORLD_SIZE": "8"}) == (0, 1)


def test_environment_when_no_process_group() -> None:
    assert not dist.is_initialized()
    assert resolve_rank(environ={"RANK": "5", "WORLD_SIZE": "8"}) == (5, 8)
    assert resolve_rank(environ={"RANK": " 0\n", "WORLD_SIZE": "1"}) == (0, 1)


def test_os_environ_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert resolve_rank() == (2, 4)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert resolve_rank() == (0, 1)


def test_default_is_rank_zero_of_one() -> None:
    assert resolve_rank(environ={}) == RankInfo(rank=0, world_size=1)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"RANK": "one", "WORLD_SIZE": "2"},
            "environment variable RANK must be a decimal integer but got 'one'",
        ),
        (
            {"RANK": "0", "WORLD_SIZE": "2.0"},
            "environment variable WORLD_SIZE must be a decimal integer but got '2.0'",
        ),
        ({"RANK": "", "WORLD_SIZE": "2"}, "RANK must be a decimal integer but got ''"),
        ({"RANK": "-1", "WORLD_SIZE": "2"}, "environment variable RANK must be >= 0 but got -1"),
        (
            {"RANK": "0", "WORLD_SIZE": "0"},
            "environment variable WORLD_SIZE must be >= 1 but got 0",
        ),
        (
            {"RANK": "4", "WORLD_SIZE": "4"},
            "environment variable RANK must be < WORLD_SIZE = 4 but got 4",
        ),
        (
            {"RANK": "1"},
            "RANK and WORLD_SIZE must be set together but RANK is set \\('1'\\) "
            "and WORLD_SIZE is not",
        ),
        (
            {"WORLD_SIZE": "8"},
            "must be set together but WORLD_SIZE is set \\('8'\\) and RANK is not",
        ),
    ],
)
def test_bad_environment(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_rank(environ=environ)


@pytest.mark.parametrize(
    ("rank", "world_size", "error", "message"),
    [
        (4, 4, ValueError, r"rank must be an integer in \[0, world_size\) = \[0, 4\) but got 4"),
        (-1, 4, ValueError, r"rank must be an integer in \[0, world_size\) = \[0, 4\) but got -1"),
        (0, 0, ValueError, r"world_size must be an integer >= 1 but got 0"),
        (1, None, ValueError, r"rank and world_size must be given together but world_size is None"),
        (None, 2, ValueError, r"world_size and rank must be given together but rank is None"),
        ("1", 2, TypeError, r"rank must be an integer but got str \('1'\)"),
        (0, True, TypeError, r"world_size must be an integer but got a bool"),
    ],
)
def test_bad_arguments(rank: Any, world_size: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        resolve_rank(rank, world_size, environ={})


def test_rank_slice() -> None:
    sampler = SequentialSampler(8, 4)
    made = rank_slice(sampler, environ={"RANK": "1", "WORLD_SIZE": "2"})
    assert isinstance(made, RankSlice)
    assert (made.sampler, made.rank, made.world_size) == (sampler, 1, 2)
    assert made.indices(0, 0, 1).tolist() == [6, 7]
    assert rank_slice(sampler, 0, 4).indices(0, 0, 0).tolist() == [0]


def test_torch_is_never_imported_nor_required() -> None:
    # In a fresh interpreter where importing torch would fail, the environment is read
    # and torch stays out of sys.modules.
    code = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # "import torch" now raises ImportError
        from aioloader.interop._ranks import resolve_rank
        print(tuple(resolve_rank(environ={"RANK": "3", "WORLD_SIZE": "5"})))
        print(tuple(resolve_rank(environ={})))
        print(sorted(name for name in sys.modules if name.startswith("torch")))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["(3, 5)", "(0, 1)", "['torch']"]
