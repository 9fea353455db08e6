"""Ingestion inputs: URLs with their metadata, numbered by their position in the input.

Formats, chosen by the file's extension:

- ``.txt`` (or anything else): one URL a line; blank lines and lines starting with ``#``
  are not inputs and take no position.
- ``.jsonl`` / ``.ndjson``: one JSON object a line with a URL field (``url`` unless told
  otherwise); every other field is kept as metadata.
- ``.parquet``: a table with a URL column; the other columns are kept as metadata
  (needs pyarrow: ``pip install 'aioloader[ingest]'``).

The position of an input is its rank among the inputs (0-based). It is the input's
identity for resume: the same file gives the same positions every time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ("InputRecord", "count_inputs", "input_format", "jsonable", "read_inputs")


@dataclass(frozen=True)
class InputRecord:
    """One input: its position, its URL and the rest of its fields."""

    position: int
    url: str
    meta: Mapping[str, Any] = field(default_factory=dict)


def input_format(path: str | os.PathLike[str]) -> str:
    """``"parquet"``, ``"jsonl"`` or ``"text"``, from the file's extension."""
    suffix = Path(path).suffix.lower()
    if suffix == ".parquet":
        return "parquet"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    return "text"


def jsonable(value: Any) -> Any:
    """``value`` as JSON can hold it (bytes as text, other objects as their ``str``)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return str(value)


def _record(position: int, row: Mapping[str, Any], url_field: str, where: str) -> InputRecord:
    url = row.get(url_field)
    if not isinstance(url, str):
        raise TypeError(
            f"{where}: the URL field {url_field!r} must be a str but got {url!r} "
            f"(fields: {sorted(row)})"
        )
    meta = {str(k): jsonable(v) for k, v in row.items() if k != url_field}
    return InputRecord(position, url.strip(), meta)


def _text_lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            text = line.strip()
            if text and not text.startswith("#"):
                yield text


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Any]]:
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not valid JSON: {exc}") from None


def _parquet_rows(path: Path, batch_rows: int = 8192) -> Iterator[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(
            f"reading {path} needs pyarrow: pip install 'aioloader[ingest]'"
        ) from None
    table = pq.ParquetFile(path)
    for batch in table.iter_batches(batch_size=batch_rows):
        yield from batch.to_pylist()


def read_inputs(
    path: str | os.PathLike[str], *, url_field: str = "url", start: int = 0
) -> Iterator[InputRecord]:
    """The inputs of a file from position ``start`` on, in order (blocking reads)."""
    source = Path(path)
    kind = input_format(source)
    position = 0
    if kind == "text":
        for line in _text_lines(source):
            if position >= start:
                yield InputRecord(position, line)
            position += 1
    elif kind == "jsonl":
        for number, row in _jsonl_rows(source):
            if position >= start:
                if not isinstance(row, dict):
                    raise ValueError(f"{source}:{number}: must be a JSON object but got {row!r}")
                yield _record(position, row, url_field, f"{source}:{number}")
            position += 1
    else:
        for row in _parquet_rows(source):
            if position >= start:
                yield _record(position, row, url_field, f"{source} row {position}")
            position += 1


def count_inputs(path: str | os.PathLike[str]) -> int:
    """How many inputs a file holds (a Parquet file says so in its footer)."""
    source = Path(path)
    kind = input_format(source)
    if kind == "parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ImportError(
                f"reading {path} needs pyarrow: pip install 'aioloader[ingest]'"
            ) from None
        return int(pq.ParquetFile(source).metadata.num_rows)
    if kind == "jsonl":
        return sum(1 for _ in _jsonl_rows(source))
    return sum(1 for _ in _text_lines(source))
