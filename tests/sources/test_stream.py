"""Stream: ordering, determinism, sharding, backpressure, errors and clean shutdown."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import AsyncIterator, Iterable

import anyio
import pytest
from anyio.lowlevel import checkpoint

from aioloader.core._rng import SampleRng, derive
from aioloader.sources._stream import Stream

pytestmark = pytest.mark.anyio


class Counted:
    """An endless async source that counts how many items it has produced."""

    def __init__(self, limit: int | None = None) -> None:
        self.produced = 0
        self.closed = False
        self.limit = limit

    async def items(self) -> AsyncIterator[int]:
        try:
            while self.limit is None or self.produced < self.limit:
                self.produced += 1
                yield self.produced - 1
                await checkpoint()
        finally:
            self.closed = True


def reference_shuffle(items: Iterable[int], size: int, seed: int) -> list[int]:
    """The documented algorithm, written out plainly."""
    rng = SampleRng(derive(seed, 0, 0, 0, 202))
    buffer: list[int] = []
    out = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        pick = rng.next_int(size)
        out.append(buffer[pick])
        buffer[pick] = item
    while buffer:
        pick = rng.next_int(len(buffer))
        buffer[pick], buffer[-1] = buffer[-1], buffer[pick]
        out.append(buffer.pop())
    return out


async def test_plain_map_filter_batch() -> None:
    async def double(x: int) -> int:
        await checkpoint()
        return 2 * x

    stream = Stream(range(10)).map(double).filter(lambda x: x % 3 != 0).batch(3)
    assert await stream.collect() == [[2, 4, 8], [10, 14, 16]]
    assert await Stream(range(7)).batch(3, drop_last=True).collect() == [[0, 1, 2], [3, 4, 5]]
    assert repr(stream) == "Stream(source -> map -> filter -> batch)"


async def test_async_filter_and_sync_map_in_threads() -> None:
    loop_thread = threading.get_ident()
    seen_threads: set[int] = set()

    def square(x: int) -> int:
        seen_threads.add(threading.get_ident())
        return x * x

    async def even(x: int) -> bool:
        return x % 2 == 0

    out = await Stream(range(8)).filter(even).map(square, concurrency=3).collect()
    assert out == [0, 4, 16, 36]
    assert loop_thread not in seen_threads


async def test_ordered_map_keeps_input_order_whatever_finishes_first() -> None:
    async def slow_first(x: int) -> int:
        for _ in range(20 - x):  # earlier items take more scheduling rounds
            await checkpoint()
        return x * 10

    out = await Stream(range(20)).map(slow_first, concurrency=6).collect()
    assert out == [x * 10 for x in range(20)]


async def test_unordered_map_yields_as_calls_finish() -> None:
    first_may_finish = anyio.Event()

    async def fn(x: int) -> int:
        if x == 0:
            await first_may_finish.wait()  # item 0 cannot finish before item 1
        else:
            first_may_finish.set()
        return x

    out = await Stream([0, 1]).map(fn, concurrency=2, ordered=False).collect()
    assert out == [1, 0]
    many = await Stream(range(50)).map(fn, concurrency=5, ordered=False).collect()
    assert sorted(many) == list(range(50))


async def test_map_concurrency_is_bounded_and_reached() -> None:
    active = peak = 0

    async def fn(x: int) -> int:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        for _ in range(5):
            await checkpoint()
        active -= 1
        return x

    for ordered in (True, False):
        peak = 0
        out = await Stream(range(30)).map(fn, concurrency=3, ordered=ordered).collect()
        assert sorted(out) == list(range(30))
        assert peak == 3


async def test_shuffle_is_a_pure_function_of_seed_and_input() -> None:
    first = await Stream(range(100)).shuffle(16, seed=7).collect()
    again = await Stream(range(100)).shuffle(16, seed=7).collect()
    other = await Stream(range(100)).shuffle(16, seed=8).collect()
    next_epoch = await Stream(range(100)).shuffle(16, seed=7, epoch=1).collect()
    assert first == again
    assert sorted(first) == list(range(100))
    assert first != other
    assert first != next_epoch
    assert first != list(range(100))
    golden = [3, 2, 4, 1, 5, 8, 7, 9, 0, 6]  # pinned: a change here changes users' streams
    assert await Stream(range(10)).shuffle(4, seed=3).collect() == golden
    assert reference_shuffle(range(10), 4, seed=3) == golden
    assert await Stream(range(5)).shuffle(1, seed=3).collect() == [0, 1, 2, 3, 4]


async def test_shuffle_after_ordered_map_is_deterministic() -> None:
    async def fn(x: int) -> int:
        for _ in range(x % 4):
            await checkpoint()
        return x

    def pipeline() -> Stream[list[int]]:
        return Stream(range(64)).map(fn, concurrency=8).shuffle(10, seed=1).batch(8)

    assert await pipeline().collect() == await pipeline().collect()


async def test_shards_are_disjoint_cover_everything_and_read_once() -> None:
    reads: Counter[int] = Counter()

    async def read(x: int) -> int:
        reads[x] += 1
        return x

    world = 3
    shares = [
        await Stream(range(20)).shard(rank, world).map(read, concurrency=4).collect()
        for rank in range(world)
    ]
    assert shares == [list(range(r, 20, world)) for r in range(world)]
    assert sorted(x for share in shares for x in share) == list(range(20))
    assert reads == Counter(range(20))  # each item read exactly once across ranks


async def test_prefetch_never_runs_more_than_n_ahead() -> None:
    source = Counted()
    async with Stream(source.items()).prefetch(4).open() as items:
        leads = []
        for consumed in range(10):
            await anyio.wait_all_tasks_blocked()  # let the producer run as far as it can
            leads.append(source.produced - consumed)
            assert await items.__anext__() == consumed
    assert leads == [4] * 10
    assert source.closed


async def test_map_pulls_at_most_concurrency_ahead() -> None:
    async def ident(x: int) -> int:
        return x

    for ordered in (True, False):
        source = Counted()
        stream = Stream(source.items()).map(ident, concurrency=3, ordered=ordered)
        async with stream.open() as items:
            leads = []
            for consumed in range(6):
                await anyio.wait_all_tasks_blocked()
                leads.append(source.produced - consumed)
                await items.__anext__()
        assert leads == [3] * 6
        assert source.closed


async def test_errors_reach_the_consumer_in_position_unwrapped() -> None:
    async def fail_on_five(x: int) -> int:
        if x == 5:
            raise KeyError(x)
        return x

    got: list[int] = []

    async def consume() -> None:
        async with Stream(range(20)).map(fail_on_five, concurrency=4).open() as items:
            async for item in items:
                got.append(item)

    with pytest.raises(KeyError):
        await consume()
    assert got == [0, 1, 2, 3, 4]

    async def broken_source() -> AsyncIterator[int]:
        yield 1
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        await Stream(broken_source()).prefetch(2).collect()
    with pytest.raises(OSError, match="disk gone"):
        await Stream(broken_source()).map(fail_on_five, concurrency=2, ordered=False).collect()


async def test_leaving_early_cancels_and_closes_everything() -> None:
    source = Counted()
    never = anyio.Event()

    async def maybe_hang(x: int) -> int:
        if x >= 3:
            await never.wait()
        return x

    stream = Stream(source.items()).map(maybe_hang, concurrency=4).prefetch(2)
    async with stream.open() as items:
        assert [await items.__anext__() for _ in range(3)] == [0, 1, 2]
    assert source.closed

    async def fail_inside() -> None:
        async with Stream(Counted().items()).prefetch(3).open() as items:
            await items.__anext__()
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):  # the body's own error, not an exception group
        await fail_inside()


async def test_finite_source_ends_every_stage() -> None:
    source = Counted(limit=9)
    out = await (
        Stream(source.items()).map(lambda x: x + 1, concurrency=2).prefetch(3).batch(4).collect()
    )
    assert out == [[1, 2, 3, 4], [5, 6, 7, 8], [9]]
    assert source.closed


def test_argument_errors() -> None:
    stream = Stream(range(3))
    with pytest.raises(ValueError, match="concurrency must be >= 1 but got 0"):
        stream.map(str, concurrency=0)
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size\) = \[0, 2\) but got 2"):
        stream.shard(2, 2)
    with pytest.raises(ValueError, match="buffer_size must be >= 1 but got 0"):
        stream.shuffle(0, seed=1)
    with pytest.raises(ValueError, match="seed must be an integer in"):
        stream.shuffle(2, seed=-1)
    with pytest.raises(TypeError, match="fn must be callable"):
        stream.map(3)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="source must be an iterable"):
        Stream(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="size must be an integer but got float"):
        stream.batch(2.0)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_leaving_an_ordered_map_early_leaves_no_task_running() -> None:
    """The ordered map's workers, waiting calls included, end with the ``async with``."""
    waiting = 0
    all_waiting = anyio.Event()

    async def slow(item: int) -> int:
        nonlocal waiting
        if item == 0:
            return item
        waiting += 1
        if waiting == 3:
            all_waiting.set()
        await anyio.sleep_forever()
        return item  # pragma: no cover

    before = len(anyio.get_running_tasks())
    async with Stream(range(100)).map(slow, concurrency=4).open() as items:
        assert await items.__anext__() == 0
        await all_waiting.wait()
        assert len(anyio.get_running_tasks()) > before
    assert len(anyio.get_running_tasks()) == before
