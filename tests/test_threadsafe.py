"""aioloader._threadsafe: a thread calls back into the running event loop."""

from __future__ import annotations

import threading

import anyio
import pytest

from aioloader._threadsafe import threadsafe_caller


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
