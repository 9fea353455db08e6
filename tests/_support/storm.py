"""Cancellation storms: cancel an operation after a given number of checkpoints, and check
that no file was left open, or closed only by the garbage collector."""

from __future__ import annotations

import asyncio
import gc
import os
import random
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import anyio.lowlevel


def open_fds() -> int:
    """The number of file descriptors this process holds (entries of ``/proc/self/fd``)."""
    return len(os.listdir("/proc/self/fd"))


def fds_under(folder: Path) -> list[str]:
    """The files under ``folder`` that this process holds open, sorted."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
        if target.startswith(str(folder)):
            found.append(target)
    return sorted(found)


def cancel_points(seed: int, rounds: int, most: int = 1 << 16) -> list[int | None]:
    """Checkpoints to cancel after, one per round: 0 (at once) and None (never) first, then
    log-uniform up to ``most``, so that rounds are cut short at every stage."""
    chooser = random.Random(seed)
    return [0, None, *(int(most ** chooser.random()) for _ in range(rounds - 2))]


async def cancel_after(checkpoints: int | None, operation: Callable[[], Awaitable[object]]) -> bool:
    """Run ``operation`` in a cancel scope that a second task cancels after passing
    ``checkpoints`` checkpoints of its own (None: never); True when ``operation`` finished."""
    finished = False
    with anyio.CancelScope() as scope:

        async def cancel() -> None:
            assert checkpoints is not None
            for _ in range(checkpoints):
                await anyio.lowlevel.checkpoint()
            scope.cancel()

        async with anyio.create_task_group() as group:
            if checkpoints is not None:
                group.start_soon(cancel)
            await operation()
            finished = True
            group.cancel_scope.cancel()
    return finished


async def cancel_task_after(
    checkpoints: int | None, operation: Callable[[], Awaitable[object]]
) -> bool:
    """As ``cancel_after``, with a plain asyncio ``task.cancel()`` (asyncio only), as
    ``asyncio.wait_for`` or a ``TaskGroup`` would: it goes through anyio's shields."""
    task = asyncio.ensure_future(operation())
    if checkpoints is not None:
        for _ in range(checkpoints):
            if task.done():
                break
            await anyio.lowlevel.checkpoint()
        task.cancel()
    with anyio.CancelScope(shield=True):
        await asyncio.wait([task])
    if task.cancelled():
        return False
    task.result()  # raises what the operation raised
    return True


def cancellers() -> list[Callable[[int | None, Callable[[], Awaitable[object]]], Awaitable[bool]]]:
    """The ways to cancel on the running backend: a cancel scope, and on asyncio (uvloop
    too) a plain ``task.cancel()`` as well."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # trio
        return [cancel_after]
    return [cancel_after, cancel_task_after]


@contextmanager
def no_file_left_open(folder: Path) -> Iterator[None]:
    """Check, once the block ends, that it left as many descriptors open as it found, none
    on a file under ``folder``, and that no file was closed by the garbage collector (a
    ``ResourceWarning``: a file nobody closed)."""
    gc.collect()
    before = open_fds()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    left = fds_under(folder)
    assert (left, unclosed) == ([], []), (
        f"left open: {left[:3]} ({len(left)}); closed by the GC: {unclosed[:3]} ({len(unclosed)})"
    )
    after = open_fds()
    assert after == before, f"{before} descriptors open before, {after} after"
