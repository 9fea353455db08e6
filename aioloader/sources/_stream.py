"""Pipelines over async iterables of unknown length: map, filter, shuffle, batch, prefetch, shard.

    stream = (
        Stream(urls)
        .shard(rank, world_size)             # before any read: each rank reads only its share
        .map(fetch, concurrency=32)          # async fn, or sync fn (runs in a thread)
        .shuffle(buffer_size=1000, seed=7)
        .batch(64)
        .prefetch(2)
    )
    async with stream.open() as batches:
        async for batch in batches:
            ...

Every stage is bounded: ``map`` holds at most ``concurrency`` items between taking them
from upstream and handing them on, ``prefetch(n)`` runs at most ``n`` items ahead of the
consumer, and the other stages pull only when pulled. A slow consumer therefore slows the
source instead of filling memory.

Background work (concurrent ``map``, ``prefetch``) lives in a task group that ``open()``
owns: leaving the ``async with`` block, normally or by an exception, cancels it and closes
every stage. An exception in any stage is raised to the consumer, unwrapped, at its position
in the stream. An ordered ``map`` is the package's one ordered map (``OrderedMap``, a pool
of worker tasks in the stream's task group); an unordered one hands results on as they
finish, so it has its own.

What a stream can promise: with ``ordered=True`` maps (the default), the same input order
gives the same elements and the same batches, for any ``concurrency`` and any timing;
``shuffle`` is a pure function of the input order, ``seed`` and ``epoch``; ``shard`` keeps
positions ``rank, rank + world_size, ...`` of the input. What it cannot promise: an
unordered map yields items as they finish, so its order (and every shuffle or batch after
it) depends on timing; and a source whose own order varies (a directory listing, a network
feed, parallel readers) makes everything after it vary the same way. Unlike the
index-addressed sources, a stream cannot seek: resuming means replaying it from the start.
Streams built on a one-shot source (an async generator) can be opened once.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Generic, TypeVar, cast, overload

import anyio
from anyio.abc import TaskGroup

from .._ordered import OrderedMap
from ..core import RngStream, SampleRng, as_int, derive, positive

__all__ = ("Stream",)

T = TypeVar("T")
U = TypeVar("U")

_Build = Callable[[TaskGroup], AsyncIterator[Any]]


class _Failure:
    """An exception travelling through a channel to be raised at the consumer."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


async def _aclose(iterator: Any) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        with anyio.CancelScope(shield=True):
            await close()


def _is_async(fn: Callable[..., Any]) -> bool:
    call = type(fn).__call__ if not inspect.isroutine(fn) else None  # an async __call__
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def _caller(fn: Callable[[Any], Any]) -> Callable[[Any], Awaitable[Any]]:
    if _is_async(fn):
        return cast(Callable[[Any], Awaitable[Any]], fn)

    async def in_thread(item: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, item)

    return in_thread


async def _from_iterable(source: AsyncIterable[Any] | Iterable[Any]) -> AsyncIterator[Any]:
    if isinstance(source, AsyncIterable):
        iterator = aiter(source)
        try:
            async for item in iterator:
                yield item
        finally:
            await _aclose(iterator)
    else:
        for item in source:
            yield item


async def _send(send: Any, item: Any) -> bool:
    """Send ``item``; False when the consumer has gone (its end of the channel closed)."""
    try:
        await send.send(item)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        return False
    return True


async def _drain(receive: Any) -> AsyncIterator[Any]:
    async with receive:
        async for item in receive:
            if isinstance(item, _Failure):
                raise item.error
            yield item


def _map_unordered(
    upstream: AsyncIterator[Any], call: Callable[[Any], Awaitable[Any]], limit: int, tg: TaskGroup
) -> AsyncIterator[Any]:
    send, receive = anyio.create_memory_object_stream[Any](0)
    budget = anyio.Semaphore(limit)

    async def work(item: Any, out: Any) -> None:
        async with out:
            try:
                result = await call(item)
            except Exception as exc:
                result = _Failure(exc)
            if await _send(out, result):
                budget.release()

    async def feed() -> None:
        async with send:
            try:
                while True:
                    await budget.acquire()
                    try:
                        item = await upstream.__anext__()
                    except StopAsyncIteration:
                        return
                    except Exception as exc:
                        await _send(send, _Failure(exc))
                        return
                    tg.start_soon(work, item, send.clone())
            finally:
                await _aclose(upstream)

    tg.start_soon(feed)
    return _drain(receive)


def _prefetch(upstream: AsyncIterator[Any], size: int, tg: TaskGroup) -> AsyncIterator[Any]:
    # A buffer of size - 1 plus the item the feeder holds while it waits: size items ahead.
    send, receive = anyio.create_memory_object_stream[Any](size - 1)

    async def feed() -> None:
        async with send:
            try:
                async for item in upstream:
                    if not await _send(send, item):
                        return
            except Exception as exc:
                await _send(send, _Failure(exc))
            finally:
                await _aclose(upstream)

    tg.start_soon(feed)
    return _drain(receive)


async def _filter(upstream: AsyncIterator[Any], pred: Callable[[Any], Any]) -> AsyncIterator[Any]:
    is_async = _is_async(pred)
    try:
        async for item in upstream:
            keep = await pred(item) if is_async else pred(item)
            if keep:
                yield item
    finally:
        await _aclose(upstream)


async def _map_inline(
    upstream: AsyncIterator[Any], call: Callable[[Any], Awaitable[Any]]
) -> AsyncIterator[Any]:
    try:
        async for item in upstream:
            yield await call(item)
    finally:
        await _aclose(upstream)


async def _shuffle(upstream: AsyncIterator[Any], size: int, rng: SampleRng) -> AsyncIterator[Any]:
    buffer: list[Any] = []
    try:
        async for item in upstream:
            if len(buffer) < size:
                buffer.append(item)
                continue
            pick = rng.next_int(size)
            out, buffer[pick] = buffer[pick], item
            yield out
    finally:
        await _aclose(upstream)
    while buffer:
        pick = rng.next_int(len(buffer))
        buffer[pick], buffer[-1] = buffer[-1], buffer[pick]
        yield buffer.pop()


async def _batch(upstream: AsyncIterator[Any], size: int, drop_last: bool) -> AsyncIterator[Any]:
    batch: list[Any] = []
    try:
        async for item in upstream:
            batch.append(item)
            if len(batch) == size:
                yield batch
                batch = []
    finally:
        await _aclose(upstream)
    if batch and not drop_last:
        yield batch


async def _shard(upstream: AsyncIterator[Any], rank: int, world: int) -> AsyncIterator[Any]:
    try:
        position = 0
        async for item in upstream:
            if position % world == rank:
                yield item
            position += 1
    finally:
        await _aclose(upstream)


class Stream(Generic[T]):
    """A lazy pipeline over an async (or plain) iterable; each method returns a new stream.

    Args:
        source: An async iterable, or a plain iterable (which must not block).
    """

    def __init__(self, source: AsyncIterable[T] | Iterable[T]) -> None:
        if not isinstance(source, (AsyncIterable, Iterable)):
            raise TypeError(f"source must be an iterable or async iterable but got {source!r}")
        self._build: _Build = lambda tg: _from_iterable(source)
        self._stages: tuple[str, ...] = ()

    def _then(self, name: str, stage: Callable[[AsyncIterator[Any], TaskGroup], Any]) -> Any:
        new: Stream[Any] = Stream.__new__(Stream)
        build = self._build
        new._build = lambda tg: stage(build(tg), tg)
        new._stages = (*self._stages, name)
        return new

    def __repr__(self) -> str:
        return "Stream(" + " -> ".join(("source", *self._stages)) + ")"

    @overload
    def map(
        self, fn: Callable[[T], Awaitable[U]], *, concurrency: int = 1, ordered: bool = True
    ) -> Stream[U]: ...

    @overload
    def map(
        self, fn: Callable[[T], U], *, concurrency: int = 1, ordered: bool = True
    ) -> Stream[U]: ...

    def map(self, fn: Callable[[T], Any], *, concurrency: int = 1, ordered: bool = True) -> Any:
        """Apply ``fn`` to every item, ``concurrency`` calls at a time.

        Async functions are awaited; plain functions run in worker threads. With
        ``ordered=True`` results keep the input order; otherwise they come as they finish.
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable but got {type(fn).__name__}")
        limit = positive("concurrency", concurrency)
        call = _caller(fn)
        if limit == 1:
            return self._then("map", lambda up, tg: _map_inline(up, call))
        if ordered:
            return self._then("map", lambda up, tg: OrderedMap(call, limit).start(tg, up))
        return self._then("map(unordered)", lambda up, tg: _map_unordered(up, call, limit, tg))

    def filter(self, pred: Callable[[T], Any]) -> Stream[T]:
        """Keep the items for which ``pred`` (sync, or async) is true."""
        if not callable(pred):
            raise TypeError(f"pred must be callable but got {type(pred).__name__}")
        return cast(Stream[T], self._then("filter", lambda up, tg: _filter(up, pred)))

    def shuffle(self, buffer_size: int, seed: int, *, epoch: int = 0) -> Stream[T]:
        """Shuffle through a buffer of ``buffer_size`` items, seeded by ``(seed, epoch)``.

        Output ``i`` is a uniform pick from the buffer, refilled by input ``buffer_size + i``;
        the picks come from ``SampleRng(derive(seed, epoch, 0, 0, 202))``.
        """
        size = positive("buffer_size", buffer_size)
        state = derive(seed, epoch, 0, 0, RngStream.SHUFFLE_BUFFER)
        return cast(
            Stream[T], self._then("shuffle", lambda up, tg: _shuffle(up, size, SampleRng(state)))
        )

    def batch(self, size: int, *, drop_last: bool = False) -> Stream[list[T]]:
        """Group items into lists of ``size``; a shorter last one is kept unless ``drop_last``."""
        count = positive("size", size)
        return cast(
            Stream[list[T]],
            self._then("batch", lambda up, tg: _batch(up, count, bool(drop_last))),
        )

    def prefetch(self, size: int) -> Stream[T]:
        """Pull up to ``size`` items ahead of the consumer in a background task."""
        count = positive("size", size)
        return cast(Stream[T], self._then("prefetch", lambda up, tg: _prefetch(up, count, tg)))

    def shard(self, rank: int, world_size: int) -> Stream[T]:
        """Keep positions ``rank, rank + world_size, ...``: ranks get disjoint shares.

        Put it before the expensive stages, so that each rank reads only its own items.
        """
        world = positive("world_size", world_size)
        position = as_int("rank", rank)
        if not 0 <= position < world:
            raise ValueError(f"rank must be in [0, world_size) = [0, {world}) but got {position}")
        return cast(Stream[T], self._then("shard", lambda up, tg: _shard(up, position, world)))

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[AsyncIterator[T]]:
        """Run the pipeline; yields the async iterator of its output.

        Leaving the block cancels background work and closes every stage.
        """
        error: Exception | None = None
        async with anyio.create_task_group() as tg:
            iterator = self._build(tg)
            try:
                yield iterator
            except Exception as exc:  # raised after the task group, unwrapped
                error = exc
            finally:
                tg.cancel_scope.cancel()
                await _aclose(iterator)
        if error is not None:
            raise error

    async def collect(self) -> list[T]:
        """Run the pipeline to the end and return every item."""
        async with self.open() as items:
            return [item async for item in items]
