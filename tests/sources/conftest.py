"""Fixtures of the source tests (``fault_proxy`` and ``s3_server`` are in tests/conftest.py)."""

from __future__ import annotations

import hashlib

import pytest


@pytest.fixture
def s3_prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix of this test alone (stable across runs, distinct between tests)."""
    return hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:12] + "/"
