"""StreamWork hosted in a background task (bare ``async for``): nothing escapes to the host."""

from __future__ import annotations

import anyio
import pytest

from aioloader.core import SequentialSampler
from aioloader.engine import DataLoader, _work
from aioloader.testing import MemoryDataset

from .helpers import TrackingCollator, make_samples

pytestmark = pytest.mark.anyio


async def test_an_engine_error_outside_the_build_reaches_the_consumer(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken_run(self: _work.StreamWork[object]) -> None:
        raise RuntimeError("the engine broke before its first step")

    # before the guard: asyncio's consumer waited forever, trio's whole run crashed
    monkeypatch.setattr(_work.StreamWork, "run", broken_run)
    loader = DataLoader(
        MemoryDataset(make_samples(8)), SequentialSampler(8, 2), TrackingCollator(), seed=1
    )
    with anyio.fail_after(30), pytest.raises(RuntimeError, match="before its first step"):
        async for _ in loader:
            pass
    assert "a stream's engine failed" in caplog.text
