"""A ``BaseException`` from user code (``sys.exit()`` in a transform, ``KeyboardInterrupt``, a
library's own ``BaseException``) ends the stream and reaches the consumer as itself, on every
path: nothing hangs, nothing is wrapped in the task groups it crossed.

Each test has a timeout: a consumer left waiting fails the test instead of stalling the run.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np
import pytest

from aioloader import LoaderClosedError, takes_rng
from aioloader.core import SampleRng, SequentialSampler
from aioloader.engine import DataLoader
from aioloader.engine._stream import StreamState
from aioloader.testing import MemoryDataset, StackCollator
from tests._support.threads import assert_threads_started_since_end

SYNC_BACKENDS = [
    pytest.param("asyncio", {"use_uvloop": False}, id="asyncio"),
    pytest.param("asyncio", {"use_uvloop": True}, id="uvloop"),
    pytest.param("trio", {}, id="trio"),
]
FAILING_INDEX = 9  # in global step 4 (batches of two)


class Abort(BaseException):
    """A library's own BaseException (as some job runners raise to stop a worker)."""


def raise_exit() -> None:
    sys.exit(3)


def raise_interrupt() -> None:
    raise KeyboardInterrupt("stop")


def raise_abort() -> None:
    raise Abort("stop")


RAISERS = [
    pytest.param(raise_exit, SystemExit, id="SystemExit"),
    pytest.param(raise_interrupt, KeyboardInterrupt, id="KeyboardInterrupt"),
    pytest.param(raise_abort, Abort, id="library"),
]


def make_loader(raiser: Any, workers: int) -> DataLoader[Any, Any]:
    @takes_rng
    def transform(sample: Any, rng: SampleRng) -> Any:
        if int(sample[0]) == FAILING_INDEX:
            raiser()
        return sample

    return DataLoader(
        MemoryDataset([np.full(3, index) for index in range(40)]),
        SequentialSampler(40, 2),
        StackCollator(),
        seed=0,
        transform=transform,
        workers=workers,
        prefetch=4,
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("raiser", "kind"), RAISERS)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(("backend", "options"), SYNC_BACKENDS)
def test_a_base_exception_reaches_the_sync_consumer_as_itself(
    backend: str, options: dict[str, Any], workers: int, raiser: Any, kind: type[BaseException]
) -> None:
    threads_before = set(threading.enumerate())
    loader = make_loader(raiser, workers)
    seen: list[int] = []

    def consume() -> None:
        for batch in loader.iter_sync(backend=backend, backend_options=options):
            seen.append(batch.global_step)

    with pytest.raises(kind) as caught:
        consume()
    if kind is SystemExit:
        assert caught.value.code == 3  # type: ignore[attr-defined]
    else:
        assert caught.value.args == ("stop",)
    assert seen == [0, 1, 2, 3]  # delivered at its step, as any error: every batch before
    assert loader.next_step == len(seen)
    assert_threads_started_since_end(threads_before)  # the portal's loop and its workers


@pytest.mark.timeout(60)
@pytest.mark.anyio
@pytest.mark.parametrize(("raiser", "kind"), RAISERS)
@pytest.mark.parametrize("workers", [0, 2])
async def test_a_base_exception_reaches_the_async_consumer_as_itself(
    workers: int, raiser: Any, kind: type[BaseException]
) -> None:
    loader = make_loader(raiser, workers)
    seen: list[int] = []
    stream = loader.stream()

    async def consume() -> None:
        async with stream as batches:
            async for batch in batches:
                seen.append(batch.global_step)

    with pytest.raises(kind):
        await consume()
    assert seen == [0, 1, 2, 3]
    assert stream.state is StreamState.FAILED
    with pytest.raises(LoaderClosedError, match=f"this batch stream failed \\({kind.__name__}"):
        await stream.__anext__()


@pytest.mark.timeout(60)
@pytest.mark.anyio
@pytest.mark.parametrize(("raiser", "kind"), RAISERS)
@pytest.mark.parametrize("workers", [0, 2])
async def test_a_base_exception_reaches_a_bare_async_for_as_itself(
    workers: int, raiser: Any, kind: type[BaseException]
) -> None:
    loader = make_loader(raiser, workers)
    seen: list[int] = []

    async def consume() -> None:
        async for batch in loader:  # the stream's work runs in a task of the host's loop
            seen.append(batch.global_step)

    with pytest.raises(kind):
        await consume()
    assert seen == [0, 1, 2, 3]
