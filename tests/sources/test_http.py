"""HttpFetcher and HttpSource against a loopback server with scripted faults.

Every fault is keyed by the URL path (tests/_support/http_server.py), so each test knows
what the server will do; nothing waits on a clock to synchronise. Tests run on asyncio
(aiohttp), uvloop (aiohttp) and trio (httpx), and the core cases also with httpx on asyncio.
"""

from __future__ import annotations

import base64
import itertools
import warnings
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from aioloader.sources import (
    FAILURE_REASONS,
    FetchResult,
    HttpFetcher,
    HttpFetchError,
    HttpNotFoundError,
    HttpSource,
    RetryPolicy,
)
from aioloader.sources._http_result import retry_after
from tests._support.http_server import HttpTestServer, jpeg_bytes, scheduled_fault

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(max_attempts=3, initial_backoff=0.001, max_backoff=0.01)
LOOPBACK = ("127.0.0.1",)


@pytest.fixture(scope="module")
def server() -> Iterator[HttpTestServer]:
    with HttpTestServer() as running:
        yield running


@pytest.fixture(params=["auto", "httpx"])
def client(request: pytest.FixtureRequest) -> str:
    """The client choice: "auto" is aiohttp on asyncio and uvloop, httpx on trio."""
    choice: str = request.param
    return choice


_NUMBERS = itertools.count(1000)


@pytest.fixture
def n() -> int:
    """A number no other test uses: counted paths (first k requests fail) stay fresh."""
    return next(_NUMBERS)


def _fetcher(client: str = "auto", **kwargs: object) -> HttpFetcher:
    options: dict[str, object] = {
        "retry": FAST,
        "read_timeout": 5.0,
        "client": client,
        "allow": LOOPBACK,
    }
    options.update(kwargs)
    return HttpFetcher(**options)  # type: ignore[arg-type]


async def test_an_image_arrives_with_status_headers_and_final_url(
    server: HttpTestServer, client: str
) -> None:
    url = server.url("/img/3.jpg")
    async with _fetcher(client) as fetcher:
        result = await fetcher.fetch(url)
    assert result.ok
    assert result.body == jpeg_bytes(3)
    assert (result.status, result.final_url, result.attempts) == (200, url, 1)
    assert result.content_type == "image/jpeg"
    assert result.headers["content-length"] == str(len(jpeg_bytes(3)))


async def test_404_fails_at_once_without_retrying(
    server: HttpTestServer, client: str, n: int
) -> None:
    path = f"/status/404/{n}"
    async with _fetcher(client) as fetcher:
        result = await fetcher.fetch(server.url(path))
    assert (result.ok, result.reason, result.status, result.detail) == (
        False,
        "status",
        404,
        "HTTP 404",
    )
    assert result.body is None
    assert (result.attempts, server.count(path)) == (1, 1)


async def test_503_with_retry_after_is_retried_until_it_succeeds(
    server: HttpTestServer, client: str, n: int
) -> None:
    path = f"/retry-after/2/0/{n}.jpg"
    async with _fetcher(client) as fetcher:
        result = await fetcher.fetch(server.url(path))
        stats = fetcher.statistics()
    assert result.ok
    assert result.attempts == 3
    assert result.body == jpeg_bytes(n)
    assert server.count(path) == 3
    assert (stats.requests, stats.retries, stats.ok, stats.failed) == (3, 2, 1, 0)


async def test_429_is_retried(server: HttpTestServer, client: str, n: int) -> None:
    path = f"/429/1/{n}.jpg"
    async with _fetcher(client) as fetcher:
        result = await fetcher.fetch(server.url(path))
    assert result.ok
    assert result.attempts == 2


async def test_retries_run_out_and_the_last_failure_is_reported(
    server: HttpTestServer, client: str, n: int
) -> None:
    path = f"/retry-after/9/0/{n}.jpg"
    async with _fetcher(client) as fetcher:
        result = await fetcher.fetch(server.url(path))
    assert (result.reason, result.status, result.attempts) == ("status", 503, 3)
    assert server.count(path) == 3


async def test_a_retry_after_longer_than_allowed_ends_the_url_at_once(
    server: HttpTestServer, client: str, n: int
) -> None:
    path = f"/retry-after/5/3600/{n}.jpg"
    async with _fetcher(client, max_retry_after=10.0) as fetcher:
        result = await fetcher.fetch(server.url(path))
    assert (result.reason, result.status, result.attempts) == ("status", 503, 1)
    assert result.detail == "HTTP 503; Retry-After 3600 s exceeds max_retry_after=10"


async def test_connection_resets_are_retried(server: HttpTestServer, client: str, n: int) -> None:
    path = f"/flaky/2/{n}.jpg"
    async with _fetcher(client) as fetcher:
        result = await fetcher.fetch(server.url(path))
        used = fetcher.statistics().client
    assert result.ok
    assert result.body == jpeg_bytes(n)
    assert server.count(path) == 3
    assert result.attempts == (2 if used == "aiohttp" else 3)  # aiohttp retries once itself


async def test_a_host_that_always_resets_ends_as_a_connection_failure(
    server: HttpTestServer, client: str, n: int
) -> None:
    path = f"/reset/{n}"
    async with _fetcher(client) as fetcher:
        result = await fetcher.fetch(server.url(path))
        used = fetcher.statistics().client
    assert (result.reason, result.status, result.attempts) == ("connection", None, 3)
    assert server.count(path) == (6 if used == "aiohttp" else 3)
    assert "reset" in result.detail


async def test_a_stalled_body_times_out(server: HttpTestServer, client: str) -> None:
    retry = RetryPolicy(max_attempts=1)
    async with _fetcher(client, read_timeout=0.2, retry=retry) as fetcher:
        result = await fetcher.fetch(server.url(f"/slow/{client}"))
    assert (result.reason, result.detail, result.attempts) == ("timeout", "read timed out", 1)


async def test_a_trickling_body_hits_the_total_timeout(server: HttpTestServer, client: str) -> None:
    retry = RetryPolicy(max_attempts=2, initial_backoff=0)
    fetcher = _fetcher(client, read_timeout=None, total_timeout=0.2, retry=retry)
    async with fetcher:
        result = await fetcher.fetch(server.url(f"/slow/total-{client}"))
    assert (result.reason, result.attempts) == ("timeout", 2)
    assert result.detail == "attempt took longer than total_timeout=0.2 s"


async def test_a_declared_oversize_body_is_refused_unread(
    server: HttpTestServer, client: str
) -> None:
    async with _fetcher(client, max_body_bytes=1000) as fetcher:
        result = await fetcher.fetch(server.url("/big/5000/x"))
    assert (result.reason, result.status) == ("too_large", 200)
    assert result.detail == "body exceeds max_body_bytes=1000 (5000)"


async def test_an_undeclared_oversize_body_is_cut_off_while_streaming(
    server: HttpTestServer, client: str
) -> None:
    async with _fetcher(client, max_body_bytes=100_000) as fetcher:
        too_big = await fetcher.fetch(server.url("/chunked/300000/x"))
        fits = await fetcher.fetch(server.url("/chunked/100000/y"))
    assert (too_big.reason, too_big.detail) == ("too_large", "body exceeds max_body_bytes=100000")
    assert fits.ok
    assert fits.body == bytes(100_000)


async def test_redirects_are_followed_to_the_final_url(server: HttpTestServer, client: str) -> None:
    async with _fetcher(client) as fetcher:
        result = await fetcher.fetch(server.url("/redirect/3/5.jpg"))
    assert result.ok
    assert result.body == jpeg_bytes(5)
    assert result.final_url == server.url("/img/5.jpg")


async def test_too_many_redirects_fail(server: HttpTestServer, client: str) -> None:
    async with _fetcher(client, max_redirects=2) as fetcher:
        result = await fetcher.fetch(server.url("/redirect/4/6.jpg"))
    assert (result.reason, result.attempts) == ("redirects", 1)


async def test_content_types_not_allowed_are_failures(server: HttpTestServer, client: str) -> None:
    async with _fetcher(client, content_types=("image/",)) as fetcher:
        text = await fetcher.fetch(server.url("/text/a"))
        image = await fetcher.fetch(server.url("/img/1.jpg"))
    assert (text.reason, text.detail) == (
        "content_type",
        "content type 'text/plain' is not one of image/",
    )
    assert image.ok


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "not a url", "http://", "http:///path"])
async def test_urls_that_cannot_be_fetched_are_failures(url: str) -> None:
    async with _fetcher() as fetcher:
        result = await fetcher.fetch(url)
    assert (result.reason, result.attempts, result.body) == ("invalid_url", 0, None)


async def test_a_refused_connection_is_a_connection_failure(client: str) -> None:
    from tests._support.s3 import free_ports

    (port,) = free_ports(1)
    async with _fetcher(client, retry=RetryPolicy(max_attempts=2, initial_backoff=0)) as fetcher:
        result = await fetcher.fetch(f"http://127.0.0.1:{port}/x")
    assert (result.reason, result.attempts) == ("connection", 2)
    assert result.detail.startswith("cannot connect")


async def test_every_url_ends_as_exactly_one_result(server: HttpTestServer, client: str) -> None:
    paths = [f"/img/{i}.jpg" for i in range(20)] + [
        "/status/404/a",
        "/status/500/b",
        "/reset/c",
        "/text/d",
        "/big/9000/e",
        "/redirect/9/f",
    ]
    results: dict[str, FetchResult] = {}
    fetcher = _fetcher(client, max_body_bytes=8000, content_types=("image/",), max_redirects=3)
    async with fetcher, anyio.create_task_group() as group:

        async def one(path: str) -> None:
            results[path] = await fetcher.fetch(server.url(path))

        for path in paths:
            group.start_soon(one, path)
    assert sorted(results) == sorted(paths)
    reasons = {path: results[path].reason for path in paths[20:]}
    assert reasons == {
        "/status/404/a": "status",
        "/status/500/b": "status",
        "/reset/c": "connection",
        "/text/d": "content_type",
        "/big/9000/e": "too_large",
        "/redirect/9/f": "redirects",
    }
    assert all(results[path].ok for path in paths[:20])
    stats = fetcher.statistics()
    assert (stats.ok, stats.failed, stats.in_flight, stats.hosts) == (20, 6, 0, 0)
    assert stats.failures == {
        "connection": 1,
        "content_type": 1,
        "redirects": 1,
        "status": 2,
        "too_large": 1,
    }
    assert set(stats.failures) <= set(FAILURE_REASONS)


async def test_per_host_and_global_bounds_hold() -> None:
    with HttpTestServer(latency=0.02) as slow:
        fetcher = HttpFetcher(max_in_flight=4, max_per_host=2, retry=FAST, allow=LOOPBACK)
        async with fetcher, anyio.create_task_group() as group:
            for i in range(12):
                group.start_soon(fetcher.fetch, slow.url(f"/img/{i}.jpg"))
        assert 1 <= slow.max_in_flight <= 2  # one host: its bound
        slow.max_in_flight = 0
        hosts = [slow.base, slow.base.replace("127.0.0.1", "localhost")]
        fetcher = HttpFetcher(max_in_flight=3, max_per_host=2, retry=FAST, allow=LOOPBACK)
        async with fetcher, anyio.create_task_group() as group:
            for i in range(16):
                group.start_soon(fetcher.fetch, f"{hosts[i % 2]}/img/{i}.jpg")
        assert 1 <= slow.max_in_flight <= 3  # two hosts of 2: the global bound


async def test_http_source_reads_by_index_and_raises_on_failures(server: HttpTestServer) -> None:
    urls = [server.url("/img/0.jpg"), server.url("/status/404/z"), server.url("/status/400/q")]
    source = HttpSource(urls, fetcher=_fetcher(), decode=lambda body, index: (index, len(body)))
    try:
        assert len(source) == 3
        assert await source.get_sample(0) == (0, len(jpeg_bytes(0)))
        with pytest.raises(HttpNotFoundError) as missing:
            await source.get_sample(1)
        assert missing.value.result.status == 404
        assert "sample 1" in str(missing.value)
        assert "HTTP 404" in str(missing.value)
        with pytest.raises(HttpFetchError) as bad:
            await source.get_samples([0, 2])
        assert not isinstance(bad.value, HttpNotFoundError)
        with pytest.raises(IndexError, match=r"index must be in \[0, 3\) but got 3"):
            await source.get_sample(3)
        assert source.statistics().failed == 2
    finally:
        await source.aclose()


def test_bad_arguments_name_the_rule() -> None:
    with pytest.raises(ValueError, match="max_in_flight must be >= 1 but got 0"):
        HttpFetcher(max_in_flight=0)
    with pytest.raises(ValueError, match="read_timeout must be a number > 0 or None"):
        HttpFetcher(read_timeout=0)
    with pytest.raises(
        TypeError, match=r"read_timeout must be a number > 0 or None but got bool \(True\)"
    ):
        HttpFetcher(read_timeout=True)
    with pytest.raises(TypeError, match=r"max_redirects must be an integer >= 0 but got a bool"):
        HttpFetcher(max_redirects=True)
    with pytest.raises(ValueError, match="max_redirects must be an integer >= 0 but got -1"):
        HttpFetcher(max_redirects=-1)
    with pytest.raises(TypeError, match="content_types must be a sequence of media types"):
        HttpFetcher(content_types="image/")
    with pytest.raises(ValueError, match="client must be one of auto, aiohttp, httpx"):
        HttpFetcher(client="curl")
    with pytest.raises(TypeError, match="urls must be a sequence of URLs but got a single str"):
        HttpSource("http://x")


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after("7") == 7.0
    assert retry_after(" 0 ") == 0.0
    assert retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0
    assert retry_after("later") is None


def test_the_scheduled_faults_are_a_function_of_seed_and_path() -> None:
    faults = [scheduled_fault(1, f"/img/{i}.jpg", 0.2) for i in range(1000)]
    assert faults == [scheduled_fault(1, f"/img/{i}.jpg", 0.2) for i in range(1000)]
    assert 150 <= sum(f is not None for f in faults) <= 250


def test_http_source_feeds_a_loader(
    server: HttpTestServer,
) -> None:
    import numpy as np

    from aioloader import DataLoader, SequentialSampler
    from aioloader.testing import StackCollator

    urls = [server.url(f"/img/{i}.jpg") for i in range(8)]

    def length(body: bytes, index: int) -> np.ndarray:
        return np.array([index, len(body)])

    source = HttpSource(urls, fetcher=_fetcher(), decode=length)
    loader = DataLoader(source, SequentialSampler(8, 4), StackCollator(), seed=0)

    async def run() -> list[list[int]]:
        rows = []
        async with loader.stream(0, 2) as batches:
            async for batch in batches:
                rows += batch.data.tolist()
        await source.aclose()
        return rows

    assert anyio.run(run) == [[i, len(jpeg_bytes(i))] for i in range(8)]


def _open_clients(port: int) -> tuple[int, int]:
    """(HTTP clients not closed, client transports to ``port`` not closed) now."""
    import asyncio
    import gc

    import aiohttp
    import httpx

    gc.collect()
    objects = gc.get_objects()
    # type(o), not isinstance: isinstance reads __class__, which some objects (torch's
    # deprecated reduce_op) answer with a warning
    sessions = sum(
        (issubclass(type(o), aiohttp.ClientSession) and not o.closed)
        or (issubclass(type(o), httpx.AsyncClient) and not o.is_closed)
        for o in objects
    )
    transports = sum(
        issubclass(type(o), asyncio.Transport)
        and not o.is_closing()
        and (o.get_extra_info("peername") or ("", 0))[1] == port
        for o in objects
    )
    return sessions, transports


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_three_sync_epochs_leave_no_client_open(backend: str) -> None:
    import numpy as np

    from aioloader import DataLoader, SequentialSampler
    from aioloader.testing import StackCollator

    def length(body: bytes, index: int) -> np.ndarray:
        return np.array([index, len(body)])

    with HttpTestServer() as own:
        port = int(own.base.rsplit(":", 1)[1])
        sessions_before, _ = _open_clients(port)
        urls = [own.url(f"/img/{i}.jpg") for i in range(8)]
        source = HttpSource(urls, fetcher=_fetcher(), decode=length)
        loader = DataLoader(source, SequentialSampler(8, 4), StackCollator(), seed=0)
        rows = []
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            for _ in range(3):
                epoch = loader.iter_sync(0, 2, backend=backend)
                rows += [batch.data.tolist() for batch in epoch]
            assert _open_clients(port) == (sessions_before, 0)
    assert rows == [[[i, len(jpeg_bytes(i))] for i in range(k, k + 4)] for k in (0, 4)] * 3
    assert source.statistics().ok == 24


async def test_a_trickling_body_fails_as_timeout_with_its_rate(
    server: HttpTestServer, client: str
) -> None:
    async with _fetcher(client, min_rate=1024, min_rate_grace=1.0) as fetcher:
        result = await fetcher.fetch(server.url("/trickle/500/t"))
    assert (result.reason, result.attempts, result.status) == ("timeout", 1, 200)
    assert "below min_rate=1024 B/s" in result.detail
    assert float(result.detail.split("at ", 1)[1].split(" ", 1)[0]) < 10


async def test_the_default_deadline_and_rate_are_set() -> None:
    fetcher = HttpFetcher()
    assert (fetcher.total_timeout, fetcher.min_rate, fetcher.min_rate_grace) == (60.0, 1024.0, 10.0)


async def test_loopback_is_refused_by_default_on_every_client(
    server: HttpTestServer, client: str
) -> None:
    path = f"/img/blocked-{client}.jpg"
    async with _fetcher(client, allow=None) as fetcher:
        literal = await fetcher.fetch(server.url(path))
        named = await fetcher.fetch(server.url(path).replace("127.0.0.1", "localhost"))
    assert (literal.reason, literal.attempts, literal.body) == ("blocked_address", 1, None)
    assert "127.0.0.1 is a loopback address" in literal.detail
    assert (named.reason, named.attempts) == ("blocked_address", 1)
    assert "localhost -> 127.0.0.1 is a loopback address" in named.detail
    assert server.count(path) == 0


@pytest.mark.parametrize(
    "target",
    ["http://127.0.0.1:{port}/img/9.jpg", "http://169.254.169.254/latest/meta-data/"],
)
async def test_a_redirect_to_a_refused_address_is_blocked(
    server: HttpTestServer, client: str, target: str
) -> None:
    port = server.base.rsplit(":", 1)[1]
    url = f"http://localhost:{port}/goto?" + target.format(port=port)
    async with _fetcher(client, allow=["localhost"]) as fetcher:
        result = await fetcher.fetch(url)
    assert (result.reason, result.attempts, result.body) == ("blocked_address", 1, None)
    assert result.final_url == target.format(port=port)


async def test_the_allow_list_lets_loopback_and_its_redirects_through(
    server: HttpTestServer, client: str
) -> None:
    url = server.url("/goto?" + server.url("/img/9.jpg").replace("127.0.0.1", "localhost"))
    async with _fetcher(client, allow=["127.0.0.0/8"]) as fetcher:
        result = await fetcher.fetch(url)
    assert (result.ok, result.body) == (True, jpeg_bytes(9))


@pytest.mark.parametrize("target", ["file:///etc/passwd", "ftp://127.0.0.1/x"])
async def test_a_redirect_to_another_scheme_fails_the_same_on_every_client(
    server: HttpTestServer, client: str, target: str
) -> None:
    async with _fetcher(client) as fetcher:
        result = await fetcher.fetch(server.url("/goto?" + target))
    assert (result.reason, result.attempts, result.final_url) == ("invalid_url", 1, target)
    assert result.detail == f"only http(s) URLs are fetched, not {target.split(':')[0]}:"


_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def _environment_proxy(monkeypatch: pytest.MonkeyPatch, proxy: str | None) -> None:
    """Set (or clear) the proxy variables of the environment, both spellings."""
    for name in _PROXY_VARIABLES:
        for spelling in (name, name.lower()):
            monkeypatch.delenv(spelling, raising=False)
    if proxy is not None:
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, proxy)


@pytest.mark.parametrize("trust_env", [False, True])
@pytest.mark.parametrize("proxy", [None, "server"])
async def test_a_host_name_resolving_to_loopback_is_refused_whatever_trust_env_says(
    server: HttpTestServer,
    client: str,
    trust_env: bool,
    proxy: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``localhost`` resolves to 127.0.0.1 from the hosts file: no DNS traffic.

    With ``proxy="server"`` the environment names the loopback server as an HTTP proxy: a
    client that used it would hand the request on unchecked (the server answers a proxied
    request 404, counted under the absolute URL).
    """
    _environment_proxy(monkeypatch, None if proxy is None else server.base)
    path = f"/img/named-{client}-{trust_env}-{proxy}.jpg"
    url = server.url(path).replace("127.0.0.1", "localhost")
    async with _fetcher(client, allow=None, trust_env=trust_env) as fetcher:
        result = await fetcher.fetch(url)
    assert (result.reason, result.attempts, result.body) == ("blocked_address", 1, None)
    assert "localhost -> 127.0.0.1 is a loopback address" in result.detail
    assert (server.count(path), server.count(url)) == (0, 0)


async def test_a_proxy_in_the_environment_is_not_used(
    server: HttpTestServer, client: str, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Port 9 on loopback refuses connections: a client that used the proxy would fail."""
    _environment_proxy(monkeypatch, "http://127.0.0.1:9")
    path = f"/img/{n}.jpg"
    async with _fetcher(client, trust_env=True) as fetcher:
        result = await fetcher.fetch(server.url(path))
    assert (result.ok, result.body) == (True, jpeg_bytes(n))
    assert server.count(path) == 1


async def test_trust_env_sends_netrc_credentials_per_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx

    (tmp_path / "netrc").write_text("machine files.test login ann password s3cret\n")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers.get("authorization")))
        return httpx.Response(200, content=b"ok")

    for trust_env in (False, True):
        fetcher = _fetcher("httpx", transport=httpx.MockTransport(handler), trust_env=trust_env)
        async with fetcher:
            for host in ("files.test", "other.test"):
                assert (await fetcher.fetch(f"http://{host}/a")).body == b"ok"
    basic = "Basic " + base64.b64encode(b"ann:s3cret").decode()
    assert seen == [("files.test", None), ("other.test", None),
                    ("files.test", basic), ("other.test", None)]  # fmt: skip
