"""ObjectStore against a real S3 server (SeaweedFS), with faults injected by a loopback proxy."""

from __future__ import annotations

import io
from collections.abc import Sequence

import anyio
import numpy as np
import obstore
import pytest
from obstore.store import MemoryStore

from aioloader import ObjectNotFoundError, SourceError, takes_plan
from aioloader._protocols import BatchedDataset
from aioloader.sources._decode import decode_npy
from aioloader.sources._object_store import (
    ObjectReader,
    ObjectStore,
    ObjectStoreStatistics,
    RetryPolicy,
)
from tests._support.proxy import LoopbackProxy
from tests._support.relay import LatencyRelay
from tests._support.s3 import S3Info

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(max_attempts=5, initial_backoff=0.001, max_backoff=0.01)


def _arrays(count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [rng.integers(0, 255, size=(3, 4 + i % 3), dtype=np.uint8) for i in range(count)]


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _upload(info: S3Info, prefix: str, blobs: dict[str, bytes]) -> None:
    store = info.store()
    for key, data in blobs.items():
        obstore.put(store, prefix + key, data)


async def test_dataset_round_trips_through_s3(s3_server: S3Info, s3_prefix: str) -> None:
    arrays = _arrays(40)
    # uploaded out of order: the listing must sort
    _upload(s3_server, s3_prefix, {f"x/{i:04d}.npy": _npy(arrays[i]) for i in reversed(range(40))})
    source = ObjectStore(
        s3_server.store(), prefix=s3_prefix + "x/", decode=decode_npy, retries=FAST
    )
    assert isinstance(source, BatchedDataset)
    assert source.keys == tuple(f"{s3_prefix}x/{i:04d}.npy" for i in range(40))
    order = [7, 0, 39, 7, 12]
    batch = await source.get_samples(order)
    for got, index in zip(batch, order, strict=True):
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, arrays[index])
    single = await source.get_sample(21)
    np.testing.assert_array_equal(single, arrays[21])
    stats = source.statistics()
    assert (stats.requests, stats.retries, stats.in_flight, stats.failures) == (6, 0, 0, 0)
    assert stats.bytes_read == sum(len(_npy(arrays[i])) for i in [*order, 21])


async def test_keys_in_given_order_and_byte_range(s3_server: S3Info, s3_prefix: str) -> None:
    _upload(s3_server, s3_prefix, {"a": b"0123456789", "b": b"abcdefghij"})
    keys = [s3_prefix + "b", s3_prefix + "a"]
    whole = ObjectStore(s3_server.store(), keys)
    assert await whole.get_samples([0, 1]) == [b"abcdefghij", b"0123456789"]
    ranged = ObjectStore(s3_server.store(), keys, byte_range=(2, 5))
    assert await ranged.get_samples([0, 1]) == [b"cde", b"234"]


async def test_missing_key_names_the_key(s3_server: S3Info, s3_prefix: str) -> None:
    source = ObjectStore(s3_server.store(), [s3_prefix + "no/such-key.npy"], retries=FAST)
    with pytest.raises(ObjectNotFoundError, match=r"'[0-9a-f]{12}/no/such-key\.npy'.*not found"):
        await source.get_sample(0)
    assert source.statistics() == ObjectStoreStatistics(1, 0, 0, 0, 1)


async def test_bad_credentials_are_denied_without_leaking_them(
    s3_server: S3Info, s3_prefix: str
) -> None:
    from obstore.store import S3Store

    _upload(s3_server, s3_prefix, {"k": b"v"})
    secret = "wrong-secret-Zq9x7"
    kwargs = {**s3_server.store_kwargs(), "secret_access_key": secret}
    store = S3Store(**kwargs, client_options={"allow_http": True}, retry_config={"max_retries": 0})
    source = ObjectStore(store, [s3_prefix + "k"], retries=FAST)
    with pytest.raises(SourceError, match="was denied") as caught:
        await source.get_sample(0)
    message = str(caught.value)
    assert s3_prefix + "k" in message
    assert secret not in message
    assert s3_server.access_key_id not in message
    assert source.statistics().requests == 1  # a permanent failure is not retried


async def test_transient_failures_are_retried(
    s3_server: S3Info, s3_prefix: str, fault_proxy: LoopbackProxy
) -> None:
    _upload(s3_server, s3_prefix, {"flaky": b"payload", "steady": b"ok"})
    store = s3_server.store(endpoint=fault_proxy.endpoint)
    source = ObjectStore(store, [s3_prefix + "flaky", s3_prefix + "steady"], retries=FAST)
    fault_proxy.inject(s3_prefix + "flaky", "503", "reset", "429", "500")
    assert await source.get_samples([0, 1]) == [b"payload", b"ok"]
    outcomes = [r.outcome for r in fault_proxy.records(s3_prefix + "flaky")]
    assert outcomes == ["503", "reset", "429", "500", "forwarded"]
    assert source.statistics() == ObjectStoreStatistics(6, 4, 9, 0, 0)


async def test_a_stalled_request_times_out_and_is_retried(
    s3_server: S3Info, s3_prefix: str, fault_proxy: LoopbackProxy
) -> None:
    _upload(s3_server, s3_prefix, {"slow": b"eventually"})
    store = s3_server.store(endpoint=fault_proxy.endpoint)
    source = ObjectStore(store, [s3_prefix + "slow"], timeout=0.3, retries=FAST)
    fault_proxy.inject(s3_prefix + "slow", "stall")
    assert await source.get_sample(0) == b"eventually"
    assert [r.outcome for r in fault_proxy.records(s3_prefix)] == ["stall", "forwarded"]
    assert source.statistics().retries == 1


@pytest.mark.parametrize("status", ["403", "404", "400"])
async def test_permanent_failures_are_not_retried(
    s3_server: S3Info, s3_prefix: str, fault_proxy: LoopbackProxy, status: str
) -> None:
    _upload(s3_server, s3_prefix, {"obj": b"data"})
    store = s3_server.store(endpoint=fault_proxy.endpoint)
    source = ObjectStore(store, [s3_prefix + "obj"], retries=FAST)
    fault_proxy.inject(s3_prefix + "obj", status)
    expected = ObjectNotFoundError if status == "404" else SourceError
    with pytest.raises(expected, match=f"{s3_prefix}obj.*HTTP {status}"):
        await source.get_sample(0)
    assert [r.outcome for r in fault_proxy.records(s3_prefix)] == [status]
    assert source.statistics() == ObjectStoreStatistics(1, 0, 0, 0, 1)


async def test_retries_run_out(
    s3_server: S3Info, s3_prefix: str, fault_proxy: LoopbackProxy
) -> None:
    _upload(s3_server, s3_prefix, {"down": b"data"})
    store = s3_server.store(endpoint=fault_proxy.endpoint)
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.001)
    source = ObjectStore(store, [s3_prefix + "down"], retries=policy)
    fault_proxy.inject(s3_prefix + "down", "503", "503", "503", "503")
    with pytest.raises(SourceError, match=r"after 3 attempts.*last error: HTTP 503 SlowDown"):
        await source.get_sample(0)
    assert [r.outcome for r in fault_proxy.records(s3_prefix)] == ["503", "503", "503"]
    assert source.statistics() == ObjectStoreStatistics(3, 2, 0, 0, 1)


async def test_concurrency_is_bounded(
    s3_server: S3Info, s3_prefix: str, fault_proxy: LoopbackProxy
) -> None:
    _upload(s3_server, s3_prefix, {f"{i:02d}": bytes([i]) * 10 for i in range(24)})
    fault_proxy.delay = 0.05  # every request overlaps the next ones
    store = s3_server.store(endpoint=fault_proxy.endpoint)
    source = ObjectStore(store, prefix=s3_prefix, max_concurrency=4, retries=FAST)
    batch = await source.get_samples(list(range(24)))
    assert batch == [bytes([i]) * 10 for i in range(24)]
    assert fault_proxy.max_active == 4
    assert source.statistics().in_flight == 0


async def test_any_obstore_store_works() -> None:
    store = MemoryStore()
    for i in range(5):
        obstore.put(store, f"m/{i}", str(i).encode())
    source = ObjectStore(store, prefix="m/")
    assert await source.get_samples([4, 0, 2]) == [b"4", b"0", b"2"]
    missing = ObjectStore(store, ["m/9"])
    with pytest.raises(ObjectNotFoundError, match="'m/9'"):
        await missing.get_sample(0)


@pytest.mark.parametrize("index", [2, 3, -1, -2, -3])
async def test_a_bad_index_is_one_clear_index_error_naming_no_object(
    s3_server: S3Info, s3_prefix: str, index: int
) -> None:
    _upload(s3_server, s3_prefix, {"a": b"A", "b": b"B"})
    source = ObjectStore(s3_server.store(), prefix=s3_prefix, retries=FAST)
    fallback = ObjectStore(
        s3_server.store(), prefix=s3_prefix, on_error="skip", fallback=lambda i: b"?"
    )
    for tried in (source, fallback):  # never skipped: a bad index is not a read failure
        with pytest.raises(IndexError) as raised:
            await tried.get_sample(index)
        # negative indices are refused, as by LocalFiles and TarShards
        assert str(raised.value) == f"index must be in [0, 2) but got {index}"
        assert raised.value.__context__ is None
        assert getattr(raised.value, "__notes__", []) == []  # no object named: none was read
        with pytest.raises(IndexError, match=rf"^index must be in \[0, 2\) but got {index}$"):
            await tried.read_bytes(index)
    with pytest.raises(IndexError) as in_batch:
        await source.get_samples([1, index])
    assert str(in_batch.value) == f"index must be in [0, 2) but got {index}"
    assert getattr(in_batch.value, "__notes__", None) == [
        f"aioloader: reading slot 1, dataset index {index}"
    ]
    assert source.statistics().requests == 1  # slot 0 runs to its end; no bad read
    assert await source.get_samples([1, 0]) == [b"B", b"A"]


def test_backoff_is_seeded_exponential_and_bounded() -> None:
    policy = RetryPolicy(initial_backoff=0.1, max_backoff=1.0, multiplier=2.0, jitter=0.5, seed=3)
    waits = [policy.backoff("key", attempt) for attempt in range(1, 7)]
    assert waits == [policy.backoff("key", attempt) for attempt in range(1, 7)]
    for wait, base in zip(waits, [0.1, 0.2, 0.4, 0.8, 1.0, 1.0], strict=True):
        assert base * 0.5 <= wait <= base
    assert waits != [RetryPolicy(seed=4).backoff("key", a) for a in range(1, 7)]
    assert policy.backoff("key", 1) != policy.backoff("other", 1)
    assert RetryPolicy(jitter=0.0, initial_backoff=0.25).backoff("k", 1) == 0.25


def test_argument_errors() -> None:
    store = MemoryStore()
    obstore.put(store, "a", b"")
    with pytest.raises(ValueError, match="max_attempts must be >= 1 but got 0"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(
        TypeError, match=r"^max_attempts must be an integer but got float \(2\.0\)$"
    ):
        RetryPolicy(max_attempts=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"jitter must be in \[0, 1\] but got 2"):
        RetryPolicy(jitter=2)
    with pytest.raises(ValueError, match="give keys or prefix, not both"):
        ObjectStore(store, ["a"], "a")
    with pytest.raises(ValueError, match="prefix 'zz/' matched no object"):
        ObjectStore(store, prefix="zz/")
    with pytest.raises(TypeError, match="keys must be a sequence of str but got one str"):
        ObjectStore(store, "a")
    with pytest.raises(ValueError, match="max_concurrency must be >= 1 but got 0"):
        ObjectStore(store, ["a"], max_concurrency=0)
    with pytest.raises(
        TypeError, match=r"^max_concurrency must be an integer but got a bool \(True\)$"
    ):
        ObjectStore(store, ["a"], max_concurrency=True)
    with pytest.raises(ValueError, match="timeout must be a number > 0 or None but got -1"):
        ObjectStore(store, ["a"], timeout=-1)
    with pytest.raises(ValueError, match=r"byte_range must be \(start, end\).*\(5, 2\)"):
        ObjectStore(store, ["a"], byte_range=(5, 2))


def test_a_timeout_is_a_number_of_seconds_not_a_bool() -> None:
    store = MemoryStore()
    obstore.put(store, "a", b"")
    with pytest.raises(
        TypeError, match=r"^timeout must be a number > 0 or None but got bool \(True\)$"
    ):
        ObjectReader(store, timeout=True)
    with pytest.raises(
        TypeError, match=r"^timeout must be a number > 0 or None but got str \('1'\)$"
    ):
        ObjectStore(store, ["a"], timeout="1")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match=r"^timeout must be a number > 0 or None but got 0$"):
        ObjectReader(store, timeout=0)
    assert [ObjectReader(store, timeout=t).timeout for t in (2, 0.5, None)] == [2, 0.5, None]


async def test_empty_objects_read_as_empty(s3_server: S3Info, s3_prefix: str) -> None:
    _upload(s3_server, s3_prefix, {"empty": b"", "one": b"1"})
    source = ObjectStore(s3_server.store(), prefix=s3_prefix, retries=FAST)
    assert await source.get_samples([0, 1]) == [b"", b"1"]
    memory = MemoryStore()
    obstore.put(memory, "e", b"")
    assert await ObjectStore(memory, ["e"]).get_sample(0) == b""


async def test_reads_through_a_latency_relay_are_identical(
    s3_server: S3Info, s3_prefix: str
) -> None:
    _upload(s3_server, s3_prefix, {f"{i}": bytes([i]) * 5000 for i in range(8)})
    with LatencyRelay(s3_server.endpoint, delay=0.05) as relay:
        assert isinstance(relay, LatencyRelay)
        source = ObjectStore(s3_server.store(endpoint=relay.endpoint), prefix=s3_prefix)
        relay.reset_statistics()
        started = anyio.current_time()
        assert await source.get_samples(list(range(8))) == [bytes([i]) * 5000 for i in range(8)]
        assert anyio.current_time() - started >= 0.05  # every request waited at least once
        counted = relay.statistics()
        assert counted.requests == 8  # one GET per object, counted at the relay
        assert counted.bytes_to_client > 8 * 5000  # bodies plus response heads
        assert counted.bytes_to_server > 0
        with pytest.raises(TypeError, match="cannot inject faults"):
            relay.inject("x", "503")


async def test_end_to_end_through_the_engine(s3_server: S3Info, s3_prefix: str) -> None:
    from aioloader.core import ShuffledSampler
    from aioloader.core._plan import BatchPlan
    from aioloader.engine import DataLoader

    arrays = _arrays(48)
    _upload(s3_server, s3_prefix, {f"{i:03d}.npy": _npy(arrays[i]) for i in range(48)})
    source = ObjectStore(s3_server.store(), prefix=s3_prefix, decode=decode_npy)

    @takes_plan
    def collate(samples: Sequence[np.ndarray], plan: BatchPlan) -> list[np.ndarray]:
        return list(samples)

    sampler = ShuffledSampler(48, 8)
    loader = DataLoader(source, sampler, collate, seed=99, prefetch=3)
    got: list[list[np.ndarray]] = []
    async with loader.stream(0, 12) as batches:  # two epochs
        async for batch in batches:
            got.append(batch)
    assert len(got) == 12
    for step, batch in enumerate(got):
        indices = sampler.indices(99, step // 6, step % 6).tolist()
        assert len(batch) == len(indices) == 8
        for array, index in zip(batch, indices, strict=True):
            np.testing.assert_array_equal(array, arrays[index])
