"""aioloader.sources._http_result: failure reasons and the fetcher's counters."""

from __future__ import annotations

import dataclasses

from aioloader.sources._http_result import FAILURE_REASONS, HttpStatistics
from aioloader.sources._object_store import ObjectStoreStatistics
from aioloader.sources._retry import RequestCounters


def test_failure_reasons_are_those_of_the_literal_in_its_order() -> None:
    assert FAILURE_REASONS == (
        "status",
        "timeout",
        "too_large",
        "content_type",
        "connection",
        "redirects",
        "invalid_url",
        "decode",
        "blocked_address",
    )


def test_statistics_start_with_the_request_counters_and_keep_their_field_order() -> None:
    http = HttpStatistics(7, 2, 4, 1, {"status": 1}, 900, 0, 0, "httpx")
    store = ObjectStoreStatistics(6, 4, 9, 0, 0)
    assert [field.name for field in dataclasses.fields(http)] == [
        *("requests", "retries", "ok", "failed", "failures"),
        *("bytes_read", "in_flight", "hosts", "client"),
    ]
    assert [field.name for field in dataclasses.fields(store)] == [
        *("requests", "retries", "bytes_read", "in_flight", "failures"),
        *("skipped", "skipped_keys"),
    ]
    assert isinstance(http, RequestCounters)
    assert isinstance(store, RequestCounters)
    assert (http.requests, http.retries, store.requests, store.retries) == (7, 2, 6, 4)
