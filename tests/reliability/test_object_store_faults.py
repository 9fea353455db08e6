"""ObjectStore on a faulty network: a real S3 server (SeaweedFS) behind a fault-injecting proxy.

The proxy resets connections, answers 503 and 429, stalls past the per-attempt timeout and
cuts bodies short, on a seeded schedule keyed by (path, request number of that path): the
same reads meet the same faults on every run, so the exact fault counts are known up front.
"""

from __future__ import annotations

import collections
import io
import traceback
from collections.abc import Sequence
from typing import Any

import anyio
import numpy as np
import obstore
import pytest

from aioloader import ObjectNotFoundError, SourceError
from aioloader.core import ShuffledSampler, digest_batch, digest_stream
from aioloader.engine import DataLoader
from aioloader.sources._decode import decode_npy
from aioloader.sources._object_store import ObjectStore, RetryPolicy
from aioloader.testing import MemoryDataset, StackCollator
from tests._support.proxy import SCHEDULED_FAULTS, LoopbackProxy, scheduled_fault
from tests._support.s3 import S3Info

pytestmark = pytest.mark.anyio

COUNT, BATCH, STEPS = 160, 10, 16  # one epoch: every object is read exactly once
SHAPE = (4, 6)
SEED = 2026
PREFIX = "faults/"  # fixed, not per test: the schedule hashes the path, so the faults are fixed
FAULT_RATE, FAULT_SEED = 0.1, 36  # seed 36 fails 21 of 181 requests, every kind at least twice
TIMEOUT = 2.0  # seconds per attempt: a stalled request costs this much; under CI load with
# coverage a forwarded read once took over 0.5 s, was retried and met one more scheduled fault
FAST = RetryPolicy(max_attempts=5, initial_backoff=0.001, max_backoff=0.01)
DEADLINE = 30.0  # no test may hang


def _arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(9)
    return [rng.integers(0, 255, size=SHAPE, dtype=np.uint8) for _ in range(COUNT)]


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def keys(s3_server: S3Info) -> tuple[str, ...]:
    """The keys of ``_arrays()``, uploaded straight to the server (not through the proxy)."""
    store = s3_server.store()
    names = tuple(f"{PREFIX}{i:04d}.npy" for i in range(COUNT))
    for name, array in zip(names, _arrays(), strict=True):
        obstore.put(store, name, _npy(array))
    return names


def _through(proxy: LoopbackProxy, info: S3Info) -> Any:
    # obstore's own timeout (5 s) only ends requests abandoned by ours (trio's threads).
    return info.store(endpoint=proxy.endpoint, client_options={"timeout": "5s"})


def _loader(source: Any, workers: int = 0) -> DataLoader[Any, Any]:
    sampler = ShuffledSampler(COUNT, BATCH)
    return DataLoader(source, sampler, StackCollator(), seed=SEED, workers=workers, prefetch=4)


async def _digests(loader: DataLoader[Any, Any]) -> list[str]:
    digests: list[str] = []
    with anyio.fail_after(DEADLINE):
        async with loader.stream(0, STEPS) as batches:
            async for batch in batches:
                assert batch.global_step == len(digests)
                digests.append(digest_batch(batch))
    return digests


async def _consume(loader: DataLoader[Any, Any], delivered: list[int]) -> None:
    async with loader.stream(0, STEPS) as batches:
        async for batch in batches:
            delivered.append(batch.global_step)


def _expected_outcomes(info: S3Info, keys: Sequence[str]) -> tuple[dict[str, int], int]:
    """The proxy's outcome counts when each key is read once, and the longest run of faults."""
    counts: collections.Counter[str] = collections.Counter()
    longest = 0
    for key in keys:
        path, n = f"/{info.bucket}/{key}", 0
        while (
            outcome := scheduled_fault(FAULT_SEED, FAULT_RATE, SCHEDULED_FAULTS, "GET", path, n)
        ) != "forwarded":
            counts[outcome] += 1
            n += 1
        counts["forwarded"] += 1
        longest = max(longest, n)
    return dict(counts), longest


@pytest.mark.parametrize("workers", [0, 2])
async def test_faults_and_retries_deliver_the_fault_free_stream(
    s3_server: S3Info, keys: tuple[str, ...], fault_proxy: LoopbackProxy, workers: int
) -> None:
    direct = ObjectStore(s3_server.store(), keys, decode=decode_npy, retries=FAST)
    expected = await _digests(_loader(direct, workers))
    assert len(expected) == STEPS

    fault_proxy.schedule(FAULT_RATE, seed=FAULT_SEED)
    source = ObjectStore(
        _through(fault_proxy, s3_server), keys, decode=decode_npy, timeout=TIMEOUT, retries=FAST
    )
    got = await _digests(_loader(source, workers))

    assert got == expected
    assert digest_stream(got) == digest_stream(expected)
    counts = fault_proxy.fault_counts()
    expected_counts, longest = _expected_outcomes(s3_server, keys)
    assert longest < FAST.max_attempts  # the seed never exhausts the retries
    assert counts == expected_counts  # reproducible: the same faults on every run
    assert all(counts[kind] >= 1 for kind in SCHEDULED_FAULTS)  # each kind really happened
    faults = sum(number for outcome, number in counts.items() if outcome != "forwarded")
    stats = source.statistics()
    assert (stats.requests, stats.retries, stats.failures, stats.in_flight) == (
        len(fault_proxy.records()),
        faults,
        0,
        0,
    )
    assert stats.bytes_read == direct.statistics().bytes_read  # no byte of a cut body counted


async def test_a_truncated_body_is_retried_never_delivered(
    s3_server: S3Info, keys: tuple[str, ...], fault_proxy: LoopbackProxy
) -> None:
    source = ObjectStore(_through(fault_proxy, s3_server), keys, timeout=None, retries=FAST)
    whole = _npy(_arrays()[3])
    fault_proxy.inject(keys[3], "truncate", "truncate")
    with anyio.fail_after(DEADLINE):
        assert await source.get_sample(3) == whole
    assert [r.outcome for r in fault_proxy.records(keys[3])] == [
        "truncate",
        "truncate",
        "forwarded",
    ]
    assert source.statistics().retries == 2
    assert source.statistics().bytes_read == len(whole)


@pytest.mark.parametrize(
    ("fault", "attempts", "message"),
    [
        ("503", 2, r"after 2 attempts.*last error: HTTP 503 SlowDown"),
        ("reset", 2, "after 2 attempts.*last error: connection error"),
        ("truncate", 2, "after 2 attempts.*last error: response body cut short"),
        ("403", 1, "was denied.*HTTP 403 AccessDenied"),
    ],
)
async def test_a_failed_read_ends_the_stream_at_its_step(
    s3_server: S3Info,
    keys: tuple[str, ...],
    fault_proxy: LoopbackProxy,
    fault: str,
    attempts: int,
    message: str,
) -> None:
    bad_step, bad_slot = 5, 3
    bad_index = int(ShuffledSampler(COUNT, BATCH).indices(SEED, 0, bad_step)[bad_slot])
    bad_key = keys[bad_index]
    fault_proxy.inject_always(bad_key, fault)
    policy = RetryPolicy(max_attempts=2, initial_backoff=0.001, max_backoff=0.01)
    source = ObjectStore(  # no stall here: no per-attempt timeout to trip on a loaded machine
        _through(fault_proxy, s3_server), keys, decode=decode_npy, timeout=None, retries=policy
    )
    delivered: list[int] = []
    with anyio.fail_after(DEADLINE), pytest.raises(SourceError, match=message) as caught:
        await _consume(_loader(source), delivered)

    assert delivered == list(range(bad_step))  # every step before it, then nothing
    error = caught.value
    assert repr(bad_key) in str(error)
    notes = getattr(error, "__notes__", [])
    assert f"aioloader: reading slot {bad_slot}, dataset index {bad_index}" in notes
    step_note = f"aioloader: while building global step {bad_step} (epoch 0, step {bad_step})"
    assert any(note.startswith(step_note) for note in notes)
    assert [r.outcome for r in fault_proxy.records(bad_key)] == [fault] * attempts
    assert source.statistics().failures == 1
    shown = "".join(traceback.format_exception(error))  # message, notes and any chained cause
    assert s3_server.secret_access_key not in shown
    assert s3_server.access_key_id not in shown


async def test_skip_policy_replaces_unreadable_samples_and_counts_them(
    s3_server: S3Info, keys: tuple[str, ...], fault_proxy: LoopbackProxy
) -> None:
    broken, missing = 7, 11  # exhausts its retries / does not exist
    names = list(keys)
    names[missing] = PREFIX + "no-such-object.npy"
    fault_proxy.inject_always(keys[broken], "503")
    placeholder = np.zeros(SHAPE, dtype=np.uint8)
    policy = RetryPolicy(max_attempts=2, initial_backoff=0.001, max_backoff=0.01)
    source = ObjectStore(
        _through(fault_proxy, s3_server),
        names,
        decode=decode_npy,
        timeout=None,  # no timeouts: the only retry is the injected 503's, however slow the host
        retries=policy,
        on_error="skip",
        fallback=lambda index: placeholder,
    )
    got = await _digests(_loader(source))

    arrays = _arrays()
    arrays[broken] = arrays[missing] = placeholder
    assert got == await _digests(_loader(MemoryDataset(arrays)))
    stats = source.statistics()
    assert (stats.skipped, stats.failures, stats.retries) == (2, 2, 1)
    assert sorted(stats.skipped_keys) == sorted([keys[broken], names[missing]])

    strict = ObjectStore(_through(fault_proxy, s3_server), names, decode=decode_npy, retries=policy)
    assert strict.on_error == "raise"  # the default never skips
    with anyio.fail_after(DEADLINE), pytest.raises(ObjectNotFoundError, match="no-such-object"):
        await strict.get_sample(missing)
    assert strict.statistics().skipped == 0


def test_skip_policy_arguments() -> None:
    from obstore.store import MemoryStore

    store = MemoryStore()
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip' but got 'ignore'"):
        ObjectStore(store, ["a"], on_error="ignore")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="on_error='skip' needs fallback"):
        ObjectStore(store, ["a"], on_error="skip")
    with pytest.raises(ValueError, match="fallback is only used with on_error='skip'"):
        ObjectStore(store, ["a"], fallback=lambda index: b"")
    with pytest.raises(TypeError, match="fallback must be callable but got int"):
        ObjectStore(store, ["a"], on_error="skip", fallback=3)  # type: ignore[call-overload]


def test_the_fault_schedule_is_seeded() -> None:
    draws = [scheduled_fault(1, 0.5, SCHEDULED_FAULTS, "GET", "/b/k", n) for n in range(400)]
    assert draws == [
        scheduled_fault(1, 0.5, SCHEDULED_FAULTS, "GET", "/b/k", n) for n in range(400)
    ]
    assert draws != [
        scheduled_fault(2, 0.5, SCHEDULED_FAULTS, "GET", "/b/k", n) for n in range(400)
    ]
    assert 150 < draws.count("forwarded") < 250
    assert set(draws) == {"forwarded", *SCHEDULED_FAULTS}
    assert scheduled_fault(1, 0.0, SCHEDULED_FAULTS, "GET", "/b/k", 0) == "forwarded"
    proxy = LoopbackProxy("http://127.0.0.1:9")  # not started: arguments are checked first
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\] but got 2"):
        proxy.schedule(2, seed=0)
    with pytest.raises(ValueError, match="fault must be 'reset', 'stall', 'truncate'"):
        proxy.inject_always("k", "drop")
