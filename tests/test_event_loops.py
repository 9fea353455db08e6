"""aioloader._event_loops: what the package does one way on asyncio and another on trio."""

from __future__ import annotations

import asyncio
import gc
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import trio

from aioloader._event_loops import (
    default_backend_options,
    file_calls,
    gather_ordered,
    loop_event_type,
    loop_key,
    run_to_end,
    running_asyncio_loop,
    spawn_system_task,
    threadsafe_caller,
)


@pytest.mark.anyio
async def test_a_thread_runs_a_function_on_the_loop_thread() -> None:
    call_soon = threadsafe_caller()
    loop_thread = threading.get_ident()
    ran_on: list[int] = []
    done = anyio.Event()

    def on_loop() -> None:
        ran_on.append(threading.get_ident())
        done.set()

    worker = threading.Thread(target=call_soon, args=(on_loop,))
    worker.start()
    await done.wait()
    worker.join()
    assert ran_on == [loop_thread]
    assert worker.ident != loop_thread


def _library(anyio_backend: Any) -> str:
    return str(anyio_backend[0])


@pytest.mark.anyio
async def test_each_loop_gets_its_own_event_class(anyio_backend: Any) -> None:
    make = loop_event_type()
    event = make()
    if _library(anyio_backend) == "trio":
        assert make is trio.Event
        assert running_asyncio_loop() is None
        assert loop_key() is trio.lowlevel.current_trio_token()
    else:
        assert make is asyncio.Event
        assert running_asyncio_loop() is asyncio.get_running_loop()
        assert loop_key() is asyncio.get_running_loop()
    assert not event.is_set()
    event.set()
    assert await event.wait() in (None, True)  # asyncio's returns True, trio's None
    assert loop_key() is loop_key()


@pytest.mark.anyio
async def test_a_system_task_runs_outside_every_task_group(anyio_backend: Any) -> None:
    ran = anyio.Event()

    async def host() -> None:
        ran.set()

    task = spawn_system_task(host, name="aioloader-test")
    await ran.wait()
    if _library(anyio_backend) == "trio":
        assert task is None
    else:
        assert task is not None
        assert task.get_name() == "aioloader-test"
        await task
        assert task.done()


@pytest.mark.anyio
async def test_file_calls_use_aiofiles_on_asyncio_only(anyio_backend: Any, tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"abcdef")
    with path.open("rb") as handle:
        calls = file_calls(handle)
        on_asyncio = _library(anyio_backend) == "asyncio"
        assert type(calls).__module__.startswith("aiofiles") is on_asyncio
        assert await calls.read(4) == b"abcd"
    assert await run_to_end(lambda: 7) == 7


@pytest.mark.anyio
async def test_ordered_gather_on_every_loop(anyio_backend: Any) -> None:
    async def work(item: int) -> int:
        for _ in range(item):
            await anyio.lowlevel.checkpoint()
        return item * 10

    assert await gather_ordered(work, [3, 0, 2, 1]) == [30, 0, 20, 10]


def test_the_backend_options_add_uvloop_to_asyncio_only() -> None:
    assert default_backend_options("asyncio") == {"use_uvloop": True}
    assert default_backend_options("trio") == {}


def test_a_gather_cancelled_after_a_failure_leaves_no_exception_unretrieved() -> None:
    reported: list[str] = []

    async def read(position: int, failed: anyio.Event) -> None:
        if position == 1:
            failed.set()
            raise OSError("the read at position 1 failed")
        await anyio.sleep_forever()  # position 0: still running when the caller leaves

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: reported.append(context["message"]))
        failed = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(gather_ordered, lambda p: read(p, failed), [0, 1, 2])
            await failed.wait()
            group.cancel_scope.cancel()
        gc.collect()  # an unretrieved exception is reported when its task is collected
        await anyio.lowlevel.checkpoint()

    anyio.run(main, backend="asyncio")
    assert reported == []
