"""aioloader.engine._processes and _worker_handle: worker processes give the threads'
batches, and clean up."""

from __future__ import annotations

import gc
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest

from aioloader import WorkerDiedError
from aioloader.core import (
    GainOffset,
    ImageBatch,
    ImageBatchCollator,
    PadCollator,
    PaddedBatch,
    SequentialSampler,
    ShuffledSampler,
    digest_batch,
    plan_batch,
)
from aioloader.engine import DataLoader
from aioloader.engine._build import build_batch
from aioloader.engine._processes import ProcessBuilders
from aioloader.engine._shm_pool import SEGMENT_PREFIX
from aioloader.engine._worker_handle import describe_exit
from aioloader.testing import MemoryDataset
from tests.engine.process_helpers import (
    BrokenInWorker,
    Crash,
    brighten,
    dict_collator,
    image_samples,
    opaque_collator,
    rows,
    sequences,
    shift,
    shm_entries,
    spawned_children,
    wait_for_fifo,
)

SEED = 99
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_process_left() -> Iterator[None]:
    """Every test leaves no worker process behind (checked by a /proc scan)."""
    before = spawned_children()
    yield
    gc.collect()  # a loader left in a reference cycle stops its persistent workers
    assert spawned_children() - before == set()
    assert multiprocessing.active_children() == []


async def collect(loader: DataLoader[Any, Any], start: int, stop: int) -> list[str]:
    out = []
    async with loader.stream(start, stop) as batches:
        async for batch in batches:
            out.append(digest_batch(batch))
            release = getattr(batch, "release", None)
            if callable(release):
                release()
    return out


async def steps_until_error(loader: DataLoader[Any, Any], stop: int, seen: list[int]) -> None:
    """Iterate ``[0, stop)`` recording each batch's step (dict batches)."""
    async with loader.stream(0, stop) as batches:
        async for batch in batches:
            seen.append(batch["step"])


CASES: dict[str, Callable[[], tuple[Any, Any, Any, int]]] = {
    "images+gain_offset": lambda: (
        image_samples(40),
        ImageBatchCollator(width_multiple=4, augment=GainOffset(0.2, 0.1)),
        brighten,
        6,
    ),
    "pad": lambda: (sequences(40), PadCollator(padding_value=-1), shift, 5),
    "user dict": lambda: (rows(40), dict_collator, None, 4),
}


@pytest.mark.anyio
@pytest.mark.parametrize("case", sorted(CASES))
async def test_processes_give_the_same_batches_as_threads(case: str) -> None:
    samples, collator, transform, batch = CASES[case]()

    def loader(**options: Any) -> DataLoader[Any, Any]:
        return DataLoader(
            MemoryDataset(samples),
            ShuffledSampler(len(samples), batch),
            collator,
            seed=SEED,
            transform=transform,
            **options,
        )

    threads = await collect(loader(workers=2), 0, 12)
    processes = await collect(loader(executor="process", workers=2, prefetch=4), 0, 12)
    assert processes == threads
    assert len(set(threads)) == 12


@pytest.mark.anyio
async def test_batches_keep_their_type_and_live_in_shared_memory() -> None:
    samples = sequences(12)
    sampler = SequentialSampler(12, 4)
    collator = PadCollator()
    builders = ProcessBuilders(1, shift, collator)
    try:
        plan = plan_batch(sampler, SEED, 1)
        chosen = [samples[i] for i in plan.indices]
        batch = await builders.build(plan, chosen)
        assert type(batch) is PaddedBatch
        assert digest_batch(batch) == digest_batch(build_batch(plan, chosen, shift, collator))
        assert batch.tokens.flags.writeable
        assert builders.statistics().segments_in_use == 1
        with batch:
            pass
        stats = builders.statistics()
        assert stats.segments_in_use == 0
        assert stats.batches_built == 1
        assert stats.segments == 1
        assert stats.startup_seconds is not None
        assert stats.startup_seconds > 0
        assert stats.ready_seconds is not None
        assert stats.ready_seconds > 0
    finally:
        builders.close()
    assert builders.statistics().workers_alive == 0


@pytest.mark.anyio
async def test_segments_are_recycled_over_many_batches() -> None:
    samples = image_samples(32)
    sampler = SequentialSampler(32, 4)
    builders = ProcessBuilders(2, None, ImageBatchCollator(augment=GainOffset()))
    kept: list[Any] = []
    try:

        async def build_steps(first: int) -> None:
            for g in range(first, 50, 4):
                plan = plan_batch(sampler, SEED, g)
                batch = await builders.build(plan, [samples[i] for i in plan.indices])
                assert isinstance(batch, ImageBatch)
                if g % 10 == 3:
                    kept.append(batch)  # held for a while: its segment is not reused
                else:
                    batch.release()

        async with anyio.create_task_group() as group:
            for first in range(4):
                group.start_soon(build_steps, first)
        stats = builders.statistics()
        assert stats.batches_built == 50
        # At most 4 batches in flight plus the 5 kept: never one segment per batch.
        assert stats.segments <= 4 + len(kept) + 2
        assert stats.segments_in_use == len(kept) == 5
        for batch in kept:
            batch.release()
        assert builders.statistics().segments_in_use == 0
    finally:
        builders.close()


@pytest.mark.anyio
async def test_an_unreleased_user_batch_gives_its_segment_back_when_collected() -> None:
    samples = rows(8)
    sampler = SequentialSampler(8, 4)
    builders = ProcessBuilders(1, None, dict_collator)
    try:
        plan = plan_batch(sampler, SEED, 0)
        batch = await builders.build(plan, [samples[i] for i in plan.indices])
        assert batch["step"] == 0
        assert batch["meta"][1] == "tag"
        x = batch["x"]
        del batch
        gc.collect()
        assert builders.statistics().segments_in_use == 1  # x still views the segment
        assert x[1].tolist() == samples[1].tolist()
        del x
        gc.collect()
        assert builders.statistics().segments_in_use == 0
    finally:
        builders.close()


@pytest.mark.anyio
async def test_transform_error_arrives_with_type_message_and_note() -> None:
    loader = DataLoader(
        MemoryDataset(rows(20)),
        SequentialSampler(20, 4),
        dict_collator,
        seed=SEED,
        transform=Crash("raise", 9.0),
        executor="process",
        workers=2,
    )
    seen: list[int] = []
    try:
        with pytest.raises(ValueError, match=r"bad sample 9\.0") as info:
            await steps_until_error(loader, 5, seen)
    finally:
        await loader.aclose()  # the error's traceback holds the loader: close, not collect
    assert seen == [0, 1]
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "global step 2 (epoch 0, step 2), slot 1, dataset index 9" in notes
    assert "raised in build worker" in notes


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("how", "code"), [("exit", "exit code 3"), ("kill", "exit code -9 (SIGKILL)")]
)
async def test_worker_death_surfaces_as_an_error_naming_worker_and_exit_code(
    how: str, code: str
) -> None:
    loader = DataLoader(
        MemoryDataset(rows(40)),
        SequentialSampler(40, 4),
        dict_collator,
        seed=SEED,
        transform=Crash(how, 21.0),  # in step 5
        executor="process",
        workers=2,
        prefetch=3,
    )
    seen: list[int] = []
    try:
        with pytest.raises(WorkerDiedError) as info:
            await steps_until_error(loader, 10, seen)
    finally:
        await loader.aclose()  # the error's traceback holds the loader: close, not collect
    error = info.value
    assert seen == list(range(len(seen)))
    assert len(seen) <= 5
    assert f"died with {code}" in str(error)
    assert f"build worker {error.worker} (pid " in str(error)
    assert error.exitcode == (3 if how == "exit" else -signal.SIGKILL)


@pytest.mark.anyio
async def test_a_worker_whose_setup_fails_dies_with_its_reason() -> None:
    builders = ProcessBuilders(1, BrokenInWorker(), dict_collator)
    try:
        plan = plan_batch(SequentialSampler(4, 4), SEED, 0)
        with pytest.raises(WorkerDiedError, match="died with exit code 1") as info:
            await builders.build(plan, rows(4))
        assert "its setup failed" in str(info.value)
        assert "only_in_the_parent" in str(info.value)
        with pytest.raises(WorkerDiedError, match="every build worker has died"):
            await builders.build(plan, rows(4))
    finally:
        builders.close()


@pytest.mark.anyio
async def test_a_batch_that_cannot_leave_the_worker_is_an_error_with_a_note() -> None:
    builders = ProcessBuilders(1, None, opaque_collator)
    try:
        plan = plan_batch(SequentialSampler(4, 4), SEED, 0)
        with pytest.raises(TypeError, match="Opaque objects do not pickle") as info:
            await builders.build(plan, rows(4))
        assert "the batch of global step 0 could not be sent" in "\n".join(
            getattr(info.value, "__notes__", [])
        )
        assert builders.statistics().workers_alive == 1
    finally:
        builders.close()


def test_describe_exit() -> None:
    assert describe_exit(3) == "exit code 3"
    assert describe_exit(-15) == "exit code -15 (SIGTERM)"
    assert describe_exit(None) == "an unknown exit code"


@pytest.mark.anyio
async def test_waiting_for_a_worker_does_not_block_the_event_loop(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sampler = SequentialSampler(1, 1)
    builders = ProcessBuilders(1, wait_for_fifo, dict_collator)
    try:
        plan = plan_batch(sampler, SEED, 0)
        result: list[Any] = []

        async def build() -> None:
            result.append(await builders.build(plan, [(7.0, str(fifo))]))

        def release_worker() -> None:
            with open(fifo, "wb") as pipe:
                pipe.write(b"x")

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(build)
                # Runs only if build() leaves the loop free while the worker waits.
                await anyio.to_thread.run_sync(release_worker)
        assert result[0]["x"].tolist() == [[7.0]]
    finally:
        builders.close()


@pytest.mark.anyio
async def test_cancelled_build_leaks_no_segment_and_no_process() -> None:
    samples = rows(16)
    sampler = SequentialSampler(16, 4)
    builders = ProcessBuilders(1, None, dict_collator)
    try:
        plan = plan_batch(sampler, SEED, 0)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await builders.build(plan, [samples[i] for i in plan.indices])
        assert scope.cancelled_caught
        # The next job queues behind the cancelled one: once it is back, so was that one.
        plan = plan_batch(sampler, SEED, 1)
        batch = await builders.build(plan, [samples[i] for i in plan.indices])
        assert batch["step"] == 1
        del batch
        gc.collect()
        stats = builders.statistics()
        assert stats.segments_in_use == 0
        assert stats.jobs_pending == 0
    finally:
        builders.close()


@pytest.mark.anyio
async def test_leaving_early_or_cancelling_leaves_no_process() -> None:
    loader = DataLoader(
        MemoryDataset(rows(64)),
        SequentialSampler(64, 4),
        dict_collator,
        seed=SEED,
        executor="process",
        persistent_workers=False,
        workers=2,
        prefetch=6,
    )
    async with loader.stream(0, 16) as batches:
        async for _ in batches:
            assert spawned_children()  # the workers exist while the stream runs
            break
    assert spawned_children() == set()
    with anyio.CancelScope() as scope:
        async with loader.stream(0, 16) as batches:
            async for _ in batches:
                scope.cancel()
                await anyio.lowlevel.checkpoint()  # where the cancellation lands
    assert scope.cancelled_caught
    assert spawned_children() == set()
    assert multiprocessing.active_children() == []


PARENT_SCRIPT = """
import sys
import anyio
import numpy as np
from aioloader.core import SequentialSampler
from aioloader import takes_plan
from aioloader.engine import DataLoader
from aioloader.testing import MemoryDataset


@takes_plan
def collate(samples, plan):
    return {"x": np.stack(samples), "step": plan.global_step}


async def main():
    loader = DataLoader(
        MemoryDataset([np.full(50_000, i, np.float64) for i in range(32)]),
        SequentialSampler(32, 4),
        collate,
        seed=1,
        executor="process",
        workers=2,
    )
    held = []
    async with loader.stream(0, 8) as batches:
        async for batch in batches:
            held.append(batch)  # keep every segment in use
            if len(held) == 4 and sys.argv[1] == "streaming":
                print("ready", flush=True)
                sys.stdin.readline()  # wait here until killed
    # Between epochs: the stream has ended, its persistent workers wait for the next one.
    print("ready", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    anyio.run(main)
"""


def wait_for_exit(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` (not a child of ours) has exited within ``seconds``."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([handle], [], [], seconds)
        return bool(readable)
    finally:
        os.close(handle)


@pytest.mark.parametrize("when", ["streaming", "between-epochs"])
def test_sigkill_of_the_parent_leaves_no_segment_and_no_process(tmp_path: Path, when: str) -> None:
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(PARENT_SCRIPT))
    before = shm_entries()
    parent = subprocess.Popen(
        [sys.executable, str(script), when],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline() == b"ready\n"
        workers = [
            int(p.name)
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and _parent_of(p) == parent.pid and b"spawn_main" in _cmd(p)
        ]
        assert len(workers) == 2
        # spawn always starts the standard library's resource tracker: one per parent,
        # whatever the number of workers or streams. It is the only other helper.
        trackers = [
            int(p.name)
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and _parent_of(p) == parent.pid and b"resource_tracker" in _cmd(p)
        ]
        assert len(trackers) == 1
        # The segments exist (mapped by the parent) but have no name in /dev/shm.
        maps = Path(f"/proc/{parent.pid}/maps").read_text()
        assert f"/memfd:{SEGMENT_PREFIX}" in maps
        assert shm_entries() == before
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        if parent.stdin is not None:
            parent.stdin.close()
        if parent.stdout is not None:
            parent.stdout.close()
    for pid in workers:
        assert wait_for_exit(pid, 60), f"worker {pid} outlived its parent"
    for pid in trackers:
        assert wait_for_exit(pid, 60), f"resource tracker {pid} outlived its parent"
    assert shm_entries() == before


def _parent_of(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1


def _cmd(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def test_bad_arguments_are_rejected() -> None:
    sampler = SequentialSampler(8, 4)
    with pytest.raises(ValueError, match="executor must be 'thread' or 'process' but got 'gpu'"):
        DataLoader(MemoryDataset(rows(8)), sampler, dict_collator, seed=1, executor="gpu")
    with pytest.raises(ValueError, match=r"executor='process' requires workers >= 1 but got"):
        DataLoader(MemoryDataset(rows(8)), sampler, dict_collator, seed=1, executor="process")
    with pytest.raises(ValueError, match=r"^workers must be an integer >= 1 but got 0$"):
        ProcessBuilders(0, None, dict_collator)
    with pytest.raises(
        TypeError, match=r"^workers must be an integer >= 1 but got a bool \(True\)$"
    ):
        ProcessBuilders(True, None, dict_collator)
    with pytest.raises(
        TypeError, match=r"^workers must be an integer >= 1 but got float \(2\.0\)$"
    ):
        ProcessBuilders(2.0, None, dict_collator)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mp_context must be 'spawn' or 'forkserver'"):
        ProcessBuilders(1, None, dict_collator, mp_context="fork")
    with pytest.raises(TypeError, match="transform and collator must pickle"):
        ProcessBuilders(1, lambda sample: sample, dict_collator)


def test_a_pool_pickles_as_an_empty_pool() -> None:
    import pickle

    collator = ImageBatchCollator(augment=GainOffset())
    collator.pool.acquire((4,), np.float32)
    clone = pickle.loads(pickle.dumps(collator))
    assert clone.pool.statistics().misses == 0
    assert repr(clone) == repr(collator)
