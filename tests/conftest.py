"""Shared fixtures: the async backends every engine test runs on, shared data paths, S3."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests._support.proxy import LoopbackProxy
    from tests._support.s3 import S3Info


REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # tests._support is importable from any working directory
    sys.path.insert(0, str(REPO_ROOT))

VECTORS = Path(__file__).resolve().parent / "data" / "public_vectors.json"


ASYNC_BACKENDS = [
    pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    pytest.param(("trio", {}), id="trio"),
]


@pytest.fixture(params=ASYNC_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """Run ``@pytest.mark.anyio`` tests on asyncio, asyncio with uvloop, and trio."""
    return request.param


@pytest.fixture(scope="session")
def public_vectors() -> dict[str, Any]:
    """The reference vectors of the independent implementation (must exist)."""
    if not VECTORS.is_file():
        pytest.fail(f"reference vectors missing: {VECTORS}")
    data: dict[str, Any] = json.loads(VECTORS.read_text())
    return data


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Info]:
    """SeaweedFS ``weed mini`` serving S3 on a free 127.0.0.1 port, for the whole session.

    Started by the first test that asks for it (source and reliability tests), never before.
    """
    from tests._support.s3 import SeaweedServer

    with SeaweedServer(bucket="aioloader-test") as server:
        yield server.info


@pytest.fixture(scope="module")
def _module_proxy(s3_server: S3Info) -> Iterator[LoopbackProxy]:
    # Module scope: its thread ends with the module, before any later test counts threads.
    from tests._support.proxy import LoopbackProxy

    with LoopbackProxy(s3_server.endpoint) as proxy:
        yield proxy


@pytest.fixture
def fault_proxy(_module_proxy: LoopbackProxy) -> Iterator[LoopbackProxy]:
    """The loopback proxy in front of ``s3_server``: no fault queued, always-on or scheduled,
    no delay, and an empty log (source and reliability tests inject their faults)."""
    _module_proxy.clear()
    _module_proxy.delay = 0.0
    yield _module_proxy
    _module_proxy.clear()
    _module_proxy.delay = 0.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests (benchmark smokes, mypy, soaks) get 30 minutes before they count as hung;
    the rest keep the 600 s of ``timeout`` in pyproject.toml."""
    for item in items:
        if (
            item.get_closest_marker("slow") is not None
            and item.get_closest_marker("timeout") is None
        ):
            item.add_marker(pytest.mark.timeout(1800))
