"""ingest(): URLs from a loopback server with faults into tar shards, read back exactly."""

from __future__ import annotations

import io
import json
import random
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from PIL import Image

from aioloader.ingest import ImageOptions, InputRecord, ingest
from aioloader.ingest._identity import InputTrail
from aioloader.sinks import ResumeMismatchError, open_shards, read_failures, read_manifest
from aioloader.sinks._manifest import InputEnd
from aioloader.sources import HttpFetcher, RetryPolicy, _http
from tests._support.http_server import HttpTestServer, jpeg_bytes, scheduled_fault

ROOT = Path(__file__).resolve().parents[2]
FAST = RetryPolicy(max_attempts=2, initial_backoff=0.001, max_backoff=0.01)
LOOPBACK = ("127.0.0.1",)


@pytest.fixture(scope="module")
def server() -> Iterator[HttpTestServer]:
    with HttpTestServer(error_rate=0.1, seed=4) as running:
        yield running


def _fetcher() -> HttpFetcher:
    return HttpFetcher(
        retry=FAST, read_timeout=1.0, max_in_flight=32, content_types=("image/",), allow=LOOPBACK
    )


async def _outputs(folder: Path) -> tuple[list[str], dict[int, str]]:
    shards = open_shards(folder)
    keys = [(await shards.read_sample(i))["__key__"] for i in range(len(shards))]
    failures = {f.position or 0: f.reason for f in read_failures(folder)}
    return keys, failures


@pytest.mark.anyio
async def test_every_input_becomes_one_sample_or_one_failure_record(
    server: HttpTestServer, tmp_path: Path
) -> None:
    paths = [f"/img/{i}.jpg" for i in range(60)] + ["/status/404/a", "/broken/b", "/text/c"]
    urls = [server.url(path) for path in paths]
    async with _fetcher() as fetcher:
        summary = await ingest(urls, tmp_path, fetcher=fetcher, shard_samples=16, key_width=4)
    keys, failures = await _outputs(tmp_path)
    expected_faults = {i: scheduled_fault(4, paths[i], 0.1) for i in range(60)}
    assert sorted([int(k) for k in keys] + list(failures)) == list(range(63))
    ok = [i for i in range(60) if expected_faults[i] is None]
    assert [int(k) for k in keys] == [*ok, 61]  # /broken/b is typed image/jpeg: kept as fetched
    reasons = {"404": "status", "503": "status", "reset": "connection", "slow": "timeout"}
    expected = {i: reasons[f] for i, f in expected_faults.items() if f is not None}
    expected.update({60: "status", 62: "content_type"})
    assert failures == expected
    assert (summary.ok, summary.failed) == (len(keys), len(failures))
    assert sum(summary.failures.values()) == summary.failed
    assert summary.shards == len(read_manifest(tmp_path).shards)


@pytest.mark.anyio
async def test_images_are_resized_and_metadata_kept(server: HttpTestServer, tmp_path: Path) -> None:
    rows = [{"url": server.url("/img/1.jpg"), "caption": "one", "id": 1},
            {"url": server.url("/broken/x"), "caption": "two", "id": 2}]  # fmt: skip
    async with _fetcher() as fetcher:
        summary = await ingest(
            rows,
            tmp_path,
            fetcher=fetcher,
            text_field="caption",
            image=ImageOptions(size=32, resize_mode="center_crop"),
        )
    assert (summary.ok, summary.failed, dict(summary.failures)) == (1, 1, {"decode": 1})
    shards = open_shards(tmp_path)
    sample = await shards.read_sample(0)
    assert sorted(sample) == ["__key__", "jpg", "json", "txt"]
    assert Image.open(io.BytesIO(sample["jpg"])).size == (32, 32)
    assert sample["txt"] == b"one"
    meta = json.loads(sample["json"])
    assert (meta["url"], meta["id"], meta["position"], meta["status"]) == (
        rows[0]["url"],
        1,
        0,
        200,
    )
    assert (meta["width"], meta["original_width"]) == (
        32,
        Image.open(io.BytesIO(jpeg_bytes(1))).width,
    )
    (failure,) = read_failures(tmp_path)
    assert (failure.position, failure.reason, failure.extra["id"]) == (1, "decode", 2)


@pytest.mark.anyio
async def test_a_run_with_a_stop_then_the_same_run_resumes_where_it_ended(
    server: HttpTestServer, tmp_path: Path
) -> None:
    urls = [server.url(f"/img/{i}.jpg") for i in range(50)]
    async with _fetcher() as fetcher:
        clean = await ingest(urls, tmp_path / "clean", fetcher=fetcher, shard_samples=8)
        first = await ingest(urls, tmp_path / "split", fetcher=fetcher, shard_samples=8, stop=23)
        second = await ingest(urls, tmp_path / "split", fetcher=fetcher, shard_samples=8)
    assert first.inputs == 23
    assert second.resumed_from == 23  # the first run closed its last shard at its end
    assert first.inputs + second.inputs == clean.inputs == 50
    assert await _outputs(tmp_path / "split") == await _outputs(tmp_path / "clean")


@pytest.mark.anyio
async def test_another_input_after_a_stopped_run_is_refused_naming_the_shard(
    server: HttpTestServer, tmp_path: Path
) -> None:
    list_a = [server.url(f"/img/{i}.jpg") for i in range(150)]
    list_b = [server.url(f"/img/{i + 1000}.jpg") for i in range(150)]
    async with _fetcher() as fetcher:
        await ingest(list_a, tmp_path, fetcher=fetcher, shard_samples=40, stop=100)
        with pytest.raises(ResumeMismatchError) as refused:
            await ingest(list_b, tmp_path, fetcher=fetcher, shard_samples=40)
        end = read_manifest(tmp_path).shards[0].end or 0  # 40 samples and failures among them
        assert str(refused.value) == (
            f"cannot resume from {tmp_path / 'manifest.json'}: the input is not the one its "
            f"shards were written from: the inputs at positions 0..{end - 1} (shard-000000.tar) "
            "differ (a URL or a field changed, or inputs were inserted or removed before "
            "them); resume with the same input, or write to a new output"
        )
        assert read_manifest(tmp_path).end == 100  # nothing written by the refused run
        rest = await ingest(list_a, tmp_path, fetcher=fetcher, shard_samples=40)
    assert (rest.resumed_from, rest.inputs) == (100, 50)


@pytest.mark.anyio
async def test_a_later_input_differing_only_in_a_field_is_refused(
    server: HttpTestServer, tmp_path: Path
) -> None:
    rows = [{"url": server.url(f"/img/{i}.jpg"), "caption": f"c{i}"} for i in range(30)]
    edited = [dict(row) for row in rows]
    edited[25]["caption"] = "changed"
    async with _fetcher() as fetcher:
        await ingest(rows, tmp_path, fetcher=fetcher, shard_samples=10, stop=20)
        await ingest(edited, tmp_path, fetcher=fetcher, shard_samples=10)  # 25 not committed
        assert read_manifest(tmp_path).end == 30
        edited[5]["caption"] = "changed"
        with pytest.raises(ResumeMismatchError, match=r"positions 0\.\.\d+ \(shard-000000.tar\)"):
            await ingest(edited, tmp_path, fetcher=fetcher, shard_samples=10)


@pytest.mark.anyio
async def test_a_changed_content_type_setting_is_refused_naming_old_and_new(
    server: HttpTestServer, tmp_path: Path
) -> None:
    urls = [server.url(f"/img/{i}.jpg") for i in range(20)]
    async with _fetcher() as fetcher:
        await ingest(urls, tmp_path, fetcher=fetcher, shard_samples=8, stop=10)
    other = HttpFetcher(retry=FAST, read_timeout=1.0, content_types=("image/png",))
    async with other:
        with pytest.raises(
            ResumeMismatchError,
            match=r"settings that decide the output changed: content_types was \['image/'\] "
            r"and is now \['image/png'\] \(resume with",
        ):
            await ingest(urls, tmp_path, fetcher=other, shard_samples=8)
        with pytest.raises(ResumeMismatchError, match="image was None and is now unset; image"):
            await ingest(urls, tmp_path, fetcher=other, image=ImageOptions(size=8))


@pytest.mark.anyio
async def test_an_input_grown_at_its_end_resumes_only_when_allowed(
    server: HttpTestServer, tmp_path: Path
) -> None:
    urls = [server.url(f"/img/{i}.jpg") for i in range(40)]
    async with _fetcher() as fetcher:
        clean = await ingest(urls, tmp_path / "clean", fetcher=fetcher, shard_samples=16)
        await ingest(urls[:25], tmp_path / "grown", fetcher=fetcher, shard_samples=16)
        assert read_manifest(tmp_path / "grown").input_end == InputEnd(25, _trail(urls[:25]))
        again = await ingest(urls[:25], tmp_path / "grown", fetcher=fetcher, shard_samples=16)
        assert (again.resumed_from, again.inputs) == (25, 0)  # the same input: nothing to do
        with pytest.raises(
            ResumeMismatchError, match="reached the end of its input at position 25"
        ):
            await ingest(urls, tmp_path / "grown", fetcher=fetcher, shard_samples=16)
        grown = await ingest(
            urls, tmp_path / "grown", fetcher=fetcher, shard_samples=16, allow_appended_input=True
        )
    assert (grown.resumed_from, grown.inputs) == (25, 15)
    assert clean.inputs == 40
    assert await _outputs(tmp_path / "grown") == await _outputs(tmp_path / "clean")


def _trail(urls: list[str]) -> str:
    trail = InputTrail()
    for position, url in enumerate(urls):
        trail.add(InputRecord(position, url))
    return trail.digest


def _run_cli(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "aioloader", "ingest", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


@pytest.mark.slow  # three killed and restarted processes
@pytest.mark.anyio
async def test_a_bad_reorder_window_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"^reorder_window must be an integer >= 1 or None but got 0$"
    ):
        await ingest([], tmp_path / "out", reorder_window=0)
    with pytest.raises(
        TypeError, match=r"^reorder_window must be an integer >= 1 or None but got a bool \(True\)$"
    ):
        await ingest([], tmp_path / "out", reorder_window=True)
    with pytest.raises(ValueError, match=r"^max_in_flight must be >= 1 but got 0$"):
        await ingest([], tmp_path / "out", max_in_flight=0)
    assert not (tmp_path / "out").exists()


def test_sigkill_at_three_random_points_then_restart_gives_every_input_exactly_once(
    server: HttpTestServer, tmp_path: Path
) -> None:
    count = 480
    urls = tmp_path / "urls.txt"
    urls.write_text("".join(server.url(f"/img/{i}.jpg") + "\n" for i in range(count)))
    options = ["--shard-samples", "20", "--read-timeout", "1", "--retries", "1"]
    options += ["--allow-address", "127.0.0.1"]
    options += ["--max-in-flight", "16", "--resize", "24"]
    out = tmp_path / "out"
    rng = random.Random(17)
    kills = []
    for _ in range(3):  # each run is killed after a random number of its own commits
        wait_for = rng.randint(1, 5)
        process = _run_cli([str(urls), str(out), *options])
        assert process.stdout is not None
        seen = [process.stdout.readline() for _ in range(wait_for)]
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
        assert all(line.startswith("committed shard-") for line in seen), seen
        kills.append(read_manifest(out).end)
    final = _run_cli([str(urls), str(out), *options])
    stdout, stderr = final.communicate(timeout=300)
    assert final.returncode == 0, stderr
    assert "resumed: inputs before position" in stdout
    assert kills == sorted(kills)
    assert 0 < kills[0] < count
    shards = open_shards(out)
    import anyio

    async def keys() -> list[int]:
        return [int((await shards.read_sample(i))["__key__"]) for i in range(len(shards))]

    written = anyio.run(keys)
    failed = [f.position for f in read_failures(out)]
    everything = sorted(written + [p for p in failed if p is not None])
    assert everything == list(range(count))  # exactly once: no duplicate, no gap
    expected_failed = [i for i in range(count) if scheduled_fault(4, f"/img/{i}.jpg", 0.1)]
    assert failed == expected_failed
    manifest = read_manifest(out)
    assert [(r.first, r.end) for r in manifest.shards] == [
        (a.end if a is not None else 0, b.end)
        for a, b in zip([None, *manifest.shards[:-1]], manifest.shards, strict=True)
    ]


class _TaskClock:
    """A fake clock per task: each reading in a task moves that task's time on by ``step``.

    A fetch reads its ``min_rate`` window's clock at the headers and then once per body
    chunk, all in its own task, so a window of ``grace`` seconds closes exactly at the
    ``grace / step``-th chunk, however slow or busy the machine is.
    """

    def __init__(self, step: float) -> None:
        self.step = step
        self._now: dict[int, float] = {}

    def __call__(self) -> float:
        task = anyio.get_current_task().id
        self._now[task] = now = self._now.get(task, 0.0) + self.step
        return now


def _trickle_failure(detail: str, grace: float) -> int:
    """The bytes a trickle delivered in its one window, from the failure's detail."""
    found = re.fullmatch(
        rf"body arrived at (\d+\.\d) B/s over {grace:.1f} s, below min_rate=1024 B/s", detail
    )
    assert found is not None, detail
    delivered = float(found.group(1)) * grace
    assert delivered == int(delivered)
    return int(delivered)


@pytest.mark.anyio
async def test_a_trickling_url_ends_as_timeout_and_the_job_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1 byte every 50 ms early among good URLs, every default but a 1 s window.

    The window is counted on a fake clock, 0.25 s a chunk: it closes at the 4th chunk.
    """
    monkeypatch.setattr(_http, "clock", _TaskClock(0.25))
    with HttpTestServer() as clean:
        urls = [clean.url(f"/img/{i}.jpg") for i in range(120)]
        urls[2] = clean.url("/trickle/50/slow")
        fetcher = HttpFetcher(allow=LOOPBACK, min_rate_grace=1.0)
        async with fetcher:
            summary = await ingest(urls, tmp_path, fetcher=fetcher)
        trickled = clean.count("/trickle/50/slow")
    assert (summary.ok, summary.failed, summary.failures) == (119, 1, {"timeout": 1})
    assert trickled == 1  # not retried: it would trickle again
    [failure] = read_failures(tmp_path)
    assert (failure.position, failure.reason) == (2, "timeout")
    assert 4 <= _trickle_failure(failure.detail, 1.0) < 1024  # one window: 4 chunks
    assert read_manifest(tmp_path).end == 120


@pytest.mark.anyio
async def test_a_trickling_url_with_every_default_does_not_stop_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22's case: a trickle at position 2 of 1,200, every default deadline.

    Only loopback is allowed (the address policy refuses it by default); the grace period,
    total deadline, read timeout, retries and window are the defaults, so the 1,197 inputs
    after the trickler wait in the window until its one grace period ends it. The 10 s
    window is counted on a fake clock, 0.5 s a chunk: it closes at the 20th chunk.
    """
    defaults = HttpFetcher()
    assert (defaults.total_timeout, defaults.min_rate, defaults.min_rate_grace) == (60, 1024, 10)
    monkeypatch.setattr(_http, "clock", _TaskClock(0.5))
    with HttpTestServer() as clean:
        urls = [clean.url(f"/img/{i}.jpg") for i in range(1200)]
        urls[2] = clean.url("/trickle/50/slow")
        fetcher = HttpFetcher(allow=LOOPBACK)
        with anyio.fail_after(240):  # a hang fails here, not in CI
            async with fetcher:
                summary = await ingest(urls, tmp_path, fetcher=fetcher)
        trickled = clean.count("/trickle/50/slow")
    assert (summary.ok, summary.failed, summary.failures) == (1199, 1, {"timeout": 1})
    assert trickled == 1  # not retried: it would trickle again
    [failure] = read_failures(tmp_path)
    assert (failure.position, failure.reason) == (2, "timeout")
    assert 20 <= _trickle_failure(failure.detail, 10.0) < 10240  # one window: 20 chunks
    manifest = read_manifest(tmp_path)
    assert (manifest.end, sum(r.samples for r in manifest.shards)) == (1200, 1199)
