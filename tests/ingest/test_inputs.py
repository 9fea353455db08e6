"""Ingestion inputs: text, JSONL and Parquet files, numbered by position."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aioloader.ingest import InputRecord, count_inputs, read_inputs


def test_text_files_skip_blank_lines_and_comments(tmp_path: Path) -> None:
    path = tmp_path / "urls.txt"
    path.write_text("# header\nhttp://a/1\n\n  http://a/2  \n#x\nhttp://a/3\n")
    assert list(read_inputs(path)) == [
        InputRecord(0, "http://a/1"),
        InputRecord(1, "http://a/2"),
        InputRecord(2, "http://a/3"),
    ]
    assert list(read_inputs(path, start=2)) == [InputRecord(2, "http://a/3")]
    assert count_inputs(path) == 3


def test_jsonl_keeps_every_other_field_as_metadata(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    rows = [{"link": "http://a/1", "caption": "a cat", "id": 7}, {"link": "http://a/2"}]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n\n")
    assert list(read_inputs(path, url_field="link")) == [
        InputRecord(0, "http://a/1", {"caption": "a cat", "id": 7}),
        InputRecord(1, "http://a/2", {}),
    ]
    assert count_inputs(path) == 2


def test_parquet_columns_become_metadata(tmp_path: Path) -> None:
    path = tmp_path / "rows.parquet"
    table = pa.table({"url": [f"http://a/{i}" for i in range(5)], "caption": list("abcde")})
    pq.write_table(table, path, row_group_size=2)
    assert list(read_inputs(path, start=3)) == [
        InputRecord(3, "http://a/3", {"caption": "d"}),
        InputRecord(4, "http://a/4", {"caption": "e"}),
    ]
    assert count_inputs(path) == 5


def test_bad_rows_are_named(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"url": "http://a"}\n{"href": "http://b"}\n')
    with pytest.raises(TypeError, match=r"rows.jsonl:2: the URL field 'url' must be a str"):
        list(read_inputs(path))
    path.write_text('{"url": "http://a"}\nnot json\n')
    with pytest.raises(ValueError, match=r"rows.jsonl:2: not valid JSON"):
        list(read_inputs(path))
