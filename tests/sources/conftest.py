"""Fixtures of the source tests: a fault proxy in front of the S3 server (SeaweedFS)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from tests._support.proxy import LoopbackProxy
from tests._support.s3 import S3Info

# s3_server (session scope, started by the first test that asks) lives in tests/conftest.py.


@pytest.fixture(scope="module")
def _module_proxy(s3_server: S3Info) -> Iterator[LoopbackProxy]:
    # Module scope: its thread ends with the module, before any later test counts threads.
    with LoopbackProxy(s3_server.endpoint) as proxy:
        yield proxy


@pytest.fixture
def fault_proxy(_module_proxy: LoopbackProxy) -> Iterator[LoopbackProxy]:
    """The loopback proxy in front of the S3 server, with no faults queued and no delay."""
    _module_proxy.clear()
    _module_proxy.delay = 0.0
    yield _module_proxy
    _module_proxy.clear()
    _module_proxy.delay = 0.0


@pytest.fixture
def s3_prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix of this test alone (stable across runs, distinct between tests)."""
    return hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:12] + "/"
