"""The W7 image server answers each URL as its fate table says (W7's checks rely on it)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections import Counter
from urllib.parse import urlsplit

import pytest

from tests._support.image_server import FATES, ImageServer, fate, generate_jpegs, image_of, url_list


def _first_of_each_fate(base: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for url in url_list(base, 2000):
        found.setdefault(fate(urlsplit(url).path), url)
    return found


def test_fates_are_a_function_of_the_path_with_2_percent_failing() -> None:
    counts = Counter(fate(urlsplit(u).path) for u in url_list("http://x", 10_000))
    assert set(counts) == set(FATES)
    failing = sum(counts[name] for name in ("missing", "unavailable", "reset", "stalled"))
    assert 150 <= failing <= 250  # about 2 %
    assert fate("/img/000123.jpg") == fate("/img/000123.jpg")


def test_each_fate_is_served_as_described() -> None:
    with ImageServer(pool=4, latency=0.0, slow_seconds=0.05, stall_seconds=5.0) as server:
        urls = _first_of_each_fate(server.base)
        images = generate_jpegs(4)
        for name in ("ok", "slow"):
            with urllib.request.urlopen(urls[name], timeout=5) as response:
                body = response.read()
            assert body == images[image_of(urlsplit(urls[name]).path, 4)]
        for name, status in (("missing", 404), ("unavailable", 503)):
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(urls[name], timeout=5)
            assert caught.value.code == status
            caught.value.close()
        with pytest.raises((ConnectionResetError, urllib.error.URLError)):
            urllib.request.urlopen(urls["reset"], timeout=5)
        with pytest.raises(TimeoutError), urllib.request.urlopen(urls["stalled"], timeout=0.3) as r:
            r.read()
