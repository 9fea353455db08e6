"""The missing-extra error: names the package and the extra, before any output exists."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from aioloader.cli import main
from aioloader.ingest import ingest
from aioloader.ingest._extras import MissingExtraError, require_ingest_packages


def _hide(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    for name in names:  # an entry of None makes both import and find_spec fail
        monkeypatch.setitem(sys.modules, name, None)


def test_without_aiohttp_and_httpx_on_asyncio_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _hide(monkeypatch, "aiohttp", "httpx")
    out = tmp_path / "out"
    with pytest.raises(MissingExtraError) as caught:
        anyio.run(ingest, ["http://example.com/a.jpg"], out)
    message = str(caught.value)
    assert message == (
        "ingestion needs aiohttp (the HTTP client on asyncio), which is not installed: "
        "pip install 'aioloader[ingest]'"
    )
    assert "trio" not in message
    assert not out.exists()


def test_on_trio_httpx_is_the_one_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _hide(monkeypatch, "httpx")
    with pytest.raises(MissingExtraError, match=r"needs httpx \(the HTTP client on trio\)"):
        anyio.run(ingest, ["http://example.com/a.jpg"], tmp_path / "out", backend="trio")
    assert not (tmp_path / "out").exists()


def test_pillow_and_pyarrow_are_needed_only_when_used(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "PIL", "pyarrow")

    async def check(inputs: object, pixels: bool) -> None:
        require_ingest_packages(inputs, None, pixels)

    anyio.run(check, "urls.txt", False)
    with pytest.raises(MissingExtraError) as caught:
        anyio.run(check, "urls.parquet", True)
    assert str(caught.value) == (
        "ingestion needs pillow (resizing and re-encoding images), pyarrow (reading Parquet "
        "inputs), which is not installed: pip install 'aioloader[ingest]'"
    )


def test_the_command_reports_it_before_creating_the_output(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _hide(monkeypatch, "aiohttp", "httpx")
    urls = tmp_path / "urls.txt"
    urls.write_text("http://example.com/a.jpg\n")
    out = tmp_path / "out"
    code = main(["ingest", str(urls), str(out)])
    printed = capsys.readouterr()
    assert (code, printed.out) == (2, "")
    assert printed.err.strip() == (
        "error: MissingExtraError: ingestion needs aiohttp (the HTTP client on asyncio), which "
        "is not installed: pip install 'aioloader[ingest]'"
    )
    assert not out.exists()
