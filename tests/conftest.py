"""Shared fixtures: the async backends every engine test runs on, shared data paths, S3."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from aioloader.testing_s3 import S3Info


def _shared_dir() -> Path:
    """The project's shared folder: $AIOLOADER_SHARED_DIR, else ../shared beside the repo."""
    override = os.environ.get("AIOLOADER_SHARED_DIR")
    candidates = [Path(override)] if override else []
    candidates += [Path(__file__).resolve().parents[2] / "shared", Path("/work/shared")]
    for candidate in candidates:
        if (candidate / "vectors").is_dir():
            return candidate
    return candidates[0]


SHARED = _shared_dir()

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
    path = SHARED / "vectors" / "public.json"
    if not path.is_file():
        pytest.fail(f"reference vectors missing: {path} (they live in the shared folder)")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Info]:
    """SeaweedFS ``weed mini`` serving S3 on a free 127.0.0.1 port, for the whole session.

    Started by the first test that asks for it (source and reliability tests), never before.
    """
    from aioloader.testing_s3 import SeaweedServer

    with SeaweedServer(bucket="aioloader-test") as server:
        yield server.info
