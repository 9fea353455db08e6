"""aioloader.cli._demo: the line-image workload, with and without the per-batch hash."""

from __future__ import annotations

import hashlib
import importlib.util
import re

import anyio
import pytest

from aioloader.cli import build_parser, main
from aioloader.cli._demo import make_demo_loader, wait_explained
from aioloader.cli._kernels import COMPILING
from aioloader.core._digest import digest_batch
from aioloader.kernels import _selection as _backend
from aioloader.kernels._cache import FILLED_MARK, Filler
from tests._support.kernels import WITHHELD, BlockingLoad, slow_kernels
from tests.cli.helpers import Fail, Run


def digest_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("digest"))


def test_digest_is_the_same_for_any_workers_backend_and_start(run: Run) -> None:
    resumed = run("demo", "--steps", "6", "--start-step", "4", "--backend", "asyncio")
    threaded = run("demo", "--steps", "6", "--start-step", "4", "--workers", "2", "--prefetch", "3")
    trio = run("demo", "--steps", "6", "--start-step", "4", "--backend", "trio")
    assert digest_line(resumed) == digest_line(threaded) == digest_line(trio)
    assert resumed.splitlines()[0] == "steps 4..9  workers 0  prefetch 8  backend asyncio"


NUMBER = r"[0-9][0-9,]*"
SECONDS = r"[0-9]+\.[0-9]{2} s"


def test_prints_start_up_steady_state_and_the_hashed_pass(run: Run) -> None:
    lines = run("demo", "--steps", "3").splitlines()
    assert [line.split()[0] for line in lines] == [
        "steps", "start-up", "steady", "waiting", "with", "digest",
    ]  # fmt: skip
    assert re.fullmatch(
        f"start-up       first batch after {SECONDS}; kernels numba ready after {SECONDS} "
        r"\(compiled once per machine, then loaded from numba's cache\)",
        lines[1],
    )
    assert re.fullmatch(
        f"steady state   {NUMBER} batches/s over 3 batches, after 16 warm-up batches", lines[2]
    )
    assert re.fullmatch(
        r"waiting        the consumer waited [0-9]+% of that time; at --workers 0 the event "
        "loop builds each batch while the consumer awaits it, so this is the build time, "
        "not starvation",
        lines[3],
    )
    assert re.fullmatch(
        f"with hashing   {NUMBER} batches/s  \\(SHA-256 of every batch on the consumer's thread\\)",
        lines[4],
    )
    assert re.fullmatch("digest         [0-9a-f]{64}", lines[5])


def test_no_digest_runs_the_loader_alone(run: Run) -> None:
    lines = run("demo", "--steps", "2", "--no-digest", "--workers", "2").splitlines()
    assert [line.split()[0] for line in lines] == ["steps", "start-up", "steady", "waiting"]
    assert re.fullmatch(
        r"waiting        the consumer waited [0-9]+% of that time: a training step would sit "
        "idle that long while the 2 worker threads built batches "
        r"\(near 0% means the loader keeps ahead\)",
        lines[3],
    )


def test_numpy_kernels_are_named_in_the_start_up_line(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIOLOADER_KERNELS", "numpy")
    line = run("demo", "--steps", "1", "--no-digest").splitlines()[1]
    assert re.fullmatch(
        f"start-up       first batch after {SECONDS}; kernels numpy ready after {SECONDS} "
        r"\(AIOLOADER_KERNELS=numpy\)",
        line,
    )


@pytest.mark.parametrize(
    ("workers", "share", "words"),
    [
        (0, 0.994, "the consumer waited 99% of that time; at --workers 0 the event loop"),
        (
            1,
            0.25,
            "the consumer waited 25% of that time: a training step would sit idle "
            "that long while the 1 worker thread built",
        ),
        (
            4,
            0.0,
            "the consumer waited 0% of that time: a training step would sit idle "
            "that long while the 4 worker threads built",
        ),
    ],
)
def test_the_wait_is_explained_for_the_worker_count(workers: int, share: float, words: str) -> None:
    assert wait_explained(workers, share).startswith(words)


def test_the_digest_covers_exactly_the_steps_named(run: Run) -> None:
    whole = digest_line(run("demo", "--steps", "4", "--backend", "asyncio"))
    loader = make_demo_loader(seed=0, workers=0, prefetch=8)

    async def hashed() -> str:
        combined = hashlib.sha256()
        async with loader.stream(0, 4) as batches:
            async for batch in batches:
                with batch:
                    combined.update(digest_batch(batch).encode())
        return combined.hexdigest()

    assert whole == f"digest         {anyio.run(hashed)}"


def test_defaults_are_the_readme_setting() -> None:
    args = build_parser().parse_args(["demo"])
    expected = ("uvloop", 0, 8, 500)  # uvloop is installed wherever the tests run
    assert (args.backend, args.workers, args.prefetch, args.steps) == expected


def test_missing_event_loop_package_is_one_line(
    fail: Fail, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec

    def without_trio(name: str, *args: object) -> object:
        return None if name == "trio" else real(name)

    monkeypatch.setattr(importlib.util, "find_spec", without_trio)
    assert fail("demo", "--steps", "1", "--backend", "trio") == (
        "error: --backend trio needs the trio package, which is not installed (pip install trio)"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "-1"], "argument --workers: must be >= 0 but got -1"),
        (["--steps", "x"], "argument --steps: must be an integer but got 'x'"),
        (["--backend", "gevent"], "argument --backend: invalid choice: 'gevent'"),
    ],
)
def test_bad_arguments(fail: Fail, argv: list[str], message: str) -> None:
    line = fail("demo", *argv)
    assert line.startswith(f"error: {message}")
    assert line.endswith("(see 'aioloader demo --help')")


@pytest.mark.parametrize("steps", ["-5", "0"])
def test_steps_below_one_get_one_message(fail: Fail, steps: str) -> None:
    assert fail("demo", "--steps", steps) == (
        f"error: argument --steps: must be >= 1 but got {steps} (see 'aioloader demo --help')"
    )


def test_a_warm_cache_loads_the_kernels_without_a_word(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _backend.load()  # the cache holds every kernel (on a cold machine: they compile here)
    monkeypatch.delenv(FILLED_MARK, raising=False)
    monkeypatch.setattr(_backend, "_filler", Filler())  # a child that finds them cached
    monkeypatch.setattr(_backend, "_loaded", None)
    with _backend.use_kernels("auto"):
        assert main(["demo", "--steps", "1", "--no-digest"]) == 0
    captured = capsys.readouterr()
    assert "kernels numba ready after" in captured.out
    # before: "loading the batch kernels (the first run on a machine compiles them: ...)"
    assert "kernels" not in captured.err


def test_kernels_that_must_compile_are_announced(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    filler = slow_kernels(monkeypatch, BlockingLoad(blocks=False))
    monkeypatch.setattr(filler, "compiles", lambda: True)  # the child found one not cached
    with _backend.use_kernels("auto"):
        assert main(["demo", "--steps", "1", "--no-digest"]) == 0
    captured = capsys.readouterr()
    assert COMPILING in captured.err.splitlines()
    assert "kernels numpy ready after" in captured.out
    assert f"(the compiled kernels could not load: {WITHHELD})" in captured.out
