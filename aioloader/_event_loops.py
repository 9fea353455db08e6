"""The event-loop libraries: everything aioloader does one way on asyncio and another on trio.

The rest of the package is written once against anyio. Where the running loop's own
primitives cost measurably less than anyio's portable ones (events, plain tasks), or a
library runs on asyncio only (aiofiles; aiohttp and obstore's async API are chosen by their
callers with ``running_asyncio_loop``), the package calls one of the operations below, each
with its asyncio form (uvloop included) and its trio form, as anyio keeps its ``_backends``.
No other module imports ``asyncio``, ``trio``, ``sniffio`` or ``uvloop``
(tests/test_architecture.py checks this).

- ``running_asyncio_loop``: the asyncio loop running the caller, or None (trio, or no loop).
- ``loop_key``: an identity of the running loop, for state kept per loop.
- ``threadsafe_caller``: call a function on the loop's thread from any thread.
- ``loop_event_type``: the loop's own one-shot event class.
- ``spawn_system_task``: host a coroutine outside every task group.
- ``gather_ordered``: calls run concurrently, results (and the first error) in order.
- ``run_to_end``: a blocking call in a worker thread, waited for even when cancelled.
- ``file_calls``: a blocking file's calls run in worker threads.
- ``default_backend_options``: the options a fresh loop of a backend starts with (uvloop).
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import IO, Any, Protocol, TypeVar

import anyio
import sniffio

__all__ = (
    "AsyncioTimeoutError",
    "LoopEvent",
    "default_backend_options",
    "file_calls",
    "gather_ordered",
    "loop_event_type",
    "loop_key",
    "run_to_end",
    "running_asyncio_loop",
    "spawn_system_task",
    "threadsafe_caller",
)

T = TypeVar("T")
R = TypeVar("R")

AsyncioTimeoutError = asyncio.TimeoutError
"""The timeout asyncio's clients raise (aiohttp's; ``TimeoutError`` itself from 3.11)."""


def _on_trio() -> bool:
    return sniffio.current_async_library() == "trio"


def running_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or None when the caller runs on another library (trio)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def loop_key() -> object:
    """The running loop itself on asyncio, trio's token on trio: one object per loop."""
    loop = running_asyncio_loop()
    if loop is not None:
        return loop
    import trio

    return trio.lowlevel.current_trio_token()


def threadsafe_caller() -> Callable[[Callable[[], object]], object]:
    """``call(fn)`` from any thread runs ``fn`` soon on the running event loop's thread.

    Call it on the event loop's thread (it looks the loop up); hand the result to threads.
    """
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:  # not on asyncio: trio (the only other backend anyio runs)
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon


class LoopEvent(Protocol):
    """What ``asyncio.Event`` and ``trio.Event`` share."""

    def set(self) -> None:
        """Wake every task waiting (a task that waits later returns at once)."""

    def is_set(self) -> bool:
        """Whether ``set`` was called."""

    async def wait(self) -> object:
        """Wait until ``set`` is called."""


def loop_event_type() -> Callable[[], LoopEvent]:
    """The running event loop's own event class (asyncio's, or trio's under trio).

    An ``anyio.Event`` asks sniffio for the running library each time one is made and wraps
    the library's own event: about a dozen Python calls from creation to wake-up. Hot waits
    take this class once and make its events: a few calls. Cancellation is the library's
    own (anyio cancels a task waiting on either).
    """
    if _on_trio():
        import trio

        return trio.Event
    return asyncio.Event


def spawn_system_task(
    fn: Callable[[], Coroutine[Any, Any, None]], name: str
) -> asyncio.Task[None] | None:
    """Run ``fn()`` in a task of the running loop that no task group owns.

    On trio it is a system task (an error escaping it crashes the run: ``fn`` must catch
    them); on asyncio a plain task, returned: keep a reference while it runs.
    """
    if _on_trio():
        import trio

        trio.lowlevel.spawn_system_task(fn, name=name)
        return None
    return asyncio.get_running_loop().create_task(fn(), name=name)


async def gather_ordered(fn: Callable[[T], Awaitable[R]], items: Sequence[T]) -> list[R]:
    """``[await fn(x) for x in items]`` run concurrently; results keep the order of ``items``.

    When the call at position ``p`` fails, the calls after ``p`` are cancelled and those
    before it run to the end; then the failure of the lowest position is raised as itself
    (not in an exception group). So which error a batch reports does not depend on timing.
    """
    if len(items) <= 1:
        return [await fn(item) for item in items]
    if running_asyncio_loop() is not None:
        return await _gather_asyncio(fn, items)
    results: list[R | None] = [None] * len(items)
    errors: dict[int, Exception] = {}
    scopes = [anyio.CancelScope() for _ in items]

    async def run(position: int, item: T) -> None:
        with scopes[position]:
            try:
                results[position] = await fn(item)
            except Exception as exc:
                errors[position] = exc
                for scope in scopes[position + 1 :]:
                    scope.cancel()

    async with anyio.create_task_group() as group:
        for position, item in enumerate(items):
            group.start_soon(run, position, item)
    if errors:
        raise errors[min(errors)]
    return results  # type: ignore[return-value]  # every slot was filled


async def _gather_asyncio(fn: Callable[[T], Awaitable[R]], items: Sequence[T]) -> list[R]:
    # Plain asyncio tasks cost a fraction of anyio's task-group tasks (a batch spawns many).
    tasks: list[asyncio.Future[R]] = []

    async def run(position: int, item: T) -> R:
        try:
            return await fn(item)
        except Exception:
            for later in tasks[position + 1 :]:
                later.cancel()
            raise

    tasks.extend(asyncio.ensure_future(run(p, item)) for p, item in enumerate(items))
    try:
        await asyncio.wait(tasks)
    finally:
        pending = [task for task in tasks if not task.done()]
        for task in pending:  # cancelled from outside: take the reads down with us
            task.cancel()
        if pending:
            with anyio.CancelScope(shield=True):
                await asyncio.wait(pending)
        for task in tasks:  # retrieved even when cancelled: no "exception never retrieved"
            if not task.cancelled():
                task.exception()
    failures = [task.exception() for task in tasks if not task.cancelled()]
    for failure in failures:  # in position order; also marks every exception retrieved
        if failure is not None:
            raise failure
    return [task.result() for task in tasks]


async def run_to_end(fn: Callable[[], T], discard: Callable[[T], object] | None = None) -> T:
    """``fn()`` in a worker thread, waited for to its end even when the caller is cancelled.

    The cancellation goes on once ``fn`` has returned; what it returned to a caller that
    is gone is passed to ``discard`` (a file to close, say). anyio's worker threads already
    wait on an anyio cancellation (so on trio this is ``anyio.to_thread.run_sync``); on
    asyncio the thread is also waited for after a plain ``task.cancel()``.
    """
    if sniffio.current_async_library() != "asyncio":
        return await anyio.to_thread.run_sync(fn)
    future = asyncio.get_running_loop().run_in_executor(None, fn)
    try:
        return await asyncio.shield(future)
    except BaseException:
        if discard is not None:

            def discard_result(done: asyncio.Future[T]) -> None:
                if not done.cancelled() and done.exception() is None:
                    discard(done.result())

            future.add_done_callback(discard_result)
        with anyio.CancelScope(shield=True):
            await asyncio.wait([future])
        raise


def file_calls(wrapped: IO[bytes]) -> Any:
    """``wrapped``'s calls as coroutines, each run in a worker thread.

    On asyncio (and uvloop) aiofiles' wrapper when it can wrap the file (a buffered file of
    ``open``); on trio, where aiofiles cannot run, or for other file objects,
    ``anyio.AsyncFile``.
    """
    if sniffio.current_async_library() == "asyncio" and isinstance(wrapped, io.BufferedIOBase):
        from aiofiles.threadpool import wrap

        return wrap(wrapped)
    return anyio.wrap_file(wrapped)


def default_backend_options(backend: str) -> dict[str, Any]:
    """``anyio.run``'s options for ``backend``: uvloop for asyncio where it is installed."""
    if backend != "asyncio":
        return {}
    try:
        import uvloop  # noqa: F401
    except ImportError:  # pragma: no cover - uvloop is installed where the platform has it
        return {}
    return {"use_uvloop": True}
