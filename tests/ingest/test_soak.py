"""The ingestion soak in its CI form: 20,000 URLs, 3 SIGKILLs and resumes, read back whole.

Marked ``slow``: CI runs it in the test command's second step.
``benchmarks/micro/soak_ingest.py --urls 1000000`` is the full soak.
"""

from __future__ import annotations

import importlib
import io
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _soak_module() -> ModuleType:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module("micro.soak_ingest")


def test_twenty_thousand_urls_killed_three_times_come_back_exactly_once(tmp_path: Path) -> None:
    soak = _soak_module()
    urls = 20_000
    result = soak.soak(urls, tmp_path, io.StringIO())
    assert (result.duplicates, result.gaps) == (0, 0)
    assert result.samples + sum(result.failures.values()) == urls
    assert len(result.kills) == 3
    assert result.kills == sorted(result.kills)
    assert 0 < result.kills[0] < result.last_run_start < urls
    assert result.rss_growth_mib <= soak.RSS_GROWTH_TARGET_MIB
    table = soak.report(result, "pytest")
    assert "| duplicates / gaps | 0 / 0 | 0 / 0: met |" in table
