"""aioloader.kernels._cache: a child fills numba's cache; the parent never waits for it."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

from aioloader.kernels import _batch as _kernels
from aioloader.kernels import _image_chain as _image_chain_kernels
from aioloader.kernels._cache import (
    FAILED,
    FILLED,
    FILLED_MARK,
    FILLING,
    Filler,
    _reported_failure,
    load_every_kernel,
    lock_path,
)
from aioloader.kernels._support import Lazy

ROOT = Path(__file__).resolve().parents[2]


def kernel_names(module: ModuleType) -> list[str]:
    """The names of ``module``'s compiled kernels, loaded or not."""
    lazy = [name for name, value in vars(module).items() if isinstance(value, Lazy)]
    loaded = [name for name, value in vars(module).items() if hasattr(value, "signatures")]
    return sorted(lazy or loaded)  # once loaded, the dispatchers replaced the Lazy wrappers


KERNELS = sorted(kernel_names(_kernels) + kernel_names(_image_chain_kernels))


@contextmanager
def compiler_held(cache: Path) -> Iterator[None]:
    """Hold the lock of ``cache``'s fillers: a child started now waits, as if compiling."""
    previous = os.environ.get("NUMBA_CACHE_DIR")
    os.environ["NUMBA_CACHE_DIR"] = str(cache)
    try:
        path = lock_path()
    finally:
        if previous is None:
            del os.environ["NUMBA_CACHE_DIR"]
        else:
            os.environ["NUMBA_CACHE_DIR"] = previous
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow  # compiles every kernel
def test_a_child_fills_an_empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    filler = Filler()
    assert filler.poll() == FILLING
    assert filler.wait() == FILLED
    assert filler.failure is None
    indexes = sorted(path.name.split(".")[1].split("-")[0] for path in tmp_path.rglob("*.nbi"))
    assert indexes == KERNELS


def test_stop_kills_a_running_child_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    with compiler_held(tmp_path):
        filler = Filler()
        assert filler.poll() == FILLING
        pid = filler.pid
        assert pid is not None
        filler.stop()
        assert gone(pid)
    assert filler.poll() == FAILED
    assert filler.failure == "stopped before the cache was filled"
    assert filler.pid is None
    assert list(tmp_path.iterdir()) == []


SHORT_SCRIPT = """
import json, sys
import anyio
from aioloader.cli._demo import make_demo_loader
from aioloader.kernels import _selection as _backend

async def main() -> None:
    loader = make_demo_loader(seed=0, workers=0, prefetch=8)
    async with loader.stream(0, 3) as batches:
        async for batch in batches:
            batch.release()

anyio.run(main)
print(json.dumps({"kernels": _backend.active(), "filler": _backend.filler_pid()}), flush=True)
sys.stdin.readline()  # the test's go: the script's last line
"""


def test_a_short_script_exits_without_waiting_for_the_compiler(tmp_path: Path) -> None:
    cache = tmp_path / "numba"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), AIOLOADER_KERNELS="auto")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    with compiler_held(cache):  # the child cannot finish while this block holds its lock
        script = subprocess.Popen(
            [sys.executable, "-c", SHORT_SCRIPT],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert script.stdin is not None
        assert script.stdout is not None
        report = json.loads(script.stdout.readline())
        assert not gone(report["filler"])  # at the script's last line the child "compiles"
        script.stdin.close()  # go: the script ends
        # the bound only ends a failing test: an exit that waited for the child would wait
        # forever, since the child cannot take the lock until this block ends
        script.wait(timeout=60)
        assert gone(report["filler"])  # killed at exit, the lock still held
        script.stdout.close()
    assert report["kernels"] == "numpy"
    assert script.returncode == 0


def test_the_child_says_when_it_compiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # empty: the first kernel compiles
    filler = Filler()
    assert filler.compiles() is False  # no child yet
    assert filler.poll() == FILLING
    assert filler.compiles() is True
    assert filler.compiles() is True  # asked again: the news is kept
    filler.stop()
    assert filler.compiles() is False


def test_a_child_that_finds_every_kernel_cached_compiles_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(FILLED_MARK, raising=False)
    assert load_every_kernel() is None  # here, as the first run on the machine would
    filler = Filler()
    assert filler.poll() == FILLING
    assert filler.compiles() is False  # it ended without compiling
    assert filler.wait() == FILLED
    assert filler.failure is None


def test_a_broken_numpy_layout_is_a_failure_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_kernels, "HEADER", None)
    assert load_every_kernel() == "numpy's array object layout is not the expected one"


def test_fillers_of_one_cache_share_one_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/a")
    first = lock_path()
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/b")
    assert lock_path() != first
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/a")
    assert lock_path() == first
    assert Path(first).name.startswith(f"aioloader-kernels-{os.getuid()}-")


@pytest.mark.parametrize(
    ("output", "returncode", "failure"),
    [
        (['{"failure": null}'], 0, None),
        (["numba says hello", '{"failure": "ImportError: no numba"}'], 0, "ImportError: no numba"),
        ([], -9, "the cache filler exited with status -9 and printed nothing"),
        (["Segmentation fault"], 1, "the cache filler printed 'Segmentation fault'"),
        (['{"other": 1}'], 0, "the cache filler printed '{\"other\": 1}'"),
    ],
)
def test_the_childs_report_is_read_from_its_last_line(
    output: list[str], returncode: int, failure: str | None
) -> None:
    assert _reported_failure(output, returncode) == failure
