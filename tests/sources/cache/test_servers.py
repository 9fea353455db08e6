"""The servers work behind the steps runs in: the latest on a loop takes new work, in its
own context, and none runs outside ``serving``."""

from __future__ import annotations

import contextvars

import anyio
import pytest

from aioloader.sources.cache._servers import Servers

WHO = contextvars.ContextVar("WHO", default="nobody")


@pytest.mark.anyio
async def test_the_latest_server_takes_new_work_in_its_own_context() -> None:
    servers = Servers()
    assert servers.latest() is None
    seen: list[tuple[str, str]] = []

    async def work(name: str) -> None:
        seen.append((name, WHO.get()))

    async with anyio.create_task_group() as outer:
        WHO.set("outer server")
        with servers.serving(outer) as first:
            assert servers.latest() is first
            async with anyio.create_task_group() as inner:
                WHO.set("inner server")
                with servers.serving(inner) as second:
                    WHO.set("a step")  # the step's own value never reaches the work
                    assert servers.latest() is second
                    second.start(work, "to the inner")
                    await anyio.wait_all_tasks_blocked()
                assert servers.latest() is first
                first.start(work, "to the outer")
    assert servers.latest() is None
    assert seen == [("to the inner", "inner server"), ("to the outer", "outer server")]
