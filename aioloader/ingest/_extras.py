"""The optional packages ingestion needs, checked before anything is written.

``pip install 'aioloader[ingest]'`` installs them all: aiohttp (the HTTP client on
asyncio), httpx (on trio), Pillow (resizing and re-encoding) and pyarrow (Parquet inputs).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from .._event_loops import running_asyncio_loop

__all__ = ("MissingExtraError", "require_ingest_packages")

EXTRA = "aioloader[ingest]"


class MissingExtraError(ImportError):
    """A package an optional feature needs is not installed; the message names the extra."""


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _http_client(fetcher: Any) -> tuple[str, str] | None:
    """(package, why) of the HTTP client this loop needs, when it is missing."""
    choice = "auto" if fetcher is None else fetcher.client
    if running_asyncio_loop() is not None:
        if choice == "httpx":
            return None if _installed("httpx") else ("httpx", "client='httpx'")
        if choice == "aiohttp" or not _installed("httpx"):
            return None if _installed("aiohttp") else ("aiohttp", "the HTTP client on asyncio")
        return None
    return None if _installed("httpx") else ("httpx", "the HTTP client on trio")


def require_ingest_packages(inputs: Any, fetcher: Any, touches_pixels: bool) -> None:
    """Raise ``MissingExtraError`` naming every missing package this run needs."""
    missing: list[tuple[str, str]] = []
    client = _http_client(fetcher)
    if client is not None:
        missing.append(client)
    if touches_pixels and not _installed("PIL"):
        missing.append(("pillow", "resizing and re-encoding images"))
    parquet = isinstance(inputs, (str, os.PathLike)) and str(inputs).lower().endswith(".parquet")
    if parquet and not _installed("pyarrow"):
        missing.append(("pyarrow", "reading Parquet inputs"))
    if missing:
        needs = ", ".join(f"{name} ({why})" for name, why in missing)
        raise MissingExtraError(
            f"ingestion needs {needs}, which is not installed: pip install '{EXTRA}'"
        )
