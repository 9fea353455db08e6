"""The manifest: JSON round trip, the resume point, and clear errors on foreign content."""

from __future__ import annotations

import json

import pytest

from aioloader.sinks import FailureRecord, Manifest, ShardRecord
from aioloader.sinks._manifest import VERSION, InputEnd


def _manifest() -> Manifest:
    return Manifest(
        (
            ShardRecord("shard-000000.tar", 3, 4096, "ab" * 32, 0, 4, failed=1),
            ShardRecord("shard-000001.tar", 2, 3072, "cd" * 32, 4, 6),
        ),
        {"inputs": "urls.txt"},
    )


def test_the_json_round_trips_and_sums() -> None:
    manifest = _manifest()
    text = manifest.to_json()
    assert Manifest.from_json(text) == manifest
    assert json.loads(text)["shards"][0] == {
        "name": "shard-000000.tar",
        "samples": 3,
        "failed": 1,
        "bytes": 4096,
        "sha256": "ab" * 32,
        "first": 0,
        "end": 4,
    }
    assert (manifest.end, manifest.total_samples, manifest.total_failed) == (6, 5, 1)
    assert (manifest.total_bytes, manifest.names) == (
        7168,
        ("shard-000000.tar", "shard-000001.tar"),
    )
    assert manifest.shards[0].index_name == "shard-000000.tar.index.json"
    assert manifest.shards[0].failures_name == "shard-000000.tar.failures.jsonl"
    assert Manifest().end == 0


def test_failure_records_round_trip() -> None:
    record = FailureRecord(7, "timeout", "read timed out", "000000007", {"url": "http://x"})
    assert FailureRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    assert FailureRecord(None, "status").to_dict() == {"position": None, "reason": "status"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "the manifest is not valid JSON"),
        ('{"format": "other"}', "the manifest's format must be 'aioloader-shards'"),
        (
            '{"format": "aioloader-shards", "version": 9}',
            r"the manifest's version must be one of \(1, 2\) but got 9",
        ),
        (
            '{"format": "aioloader-shards", "version": 1, "shards": [{"name": "a"}]}',
            "the manifest has a malformed record",
        ),
    ],
)
def test_foreign_content_is_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Manifest.from_json(text)


def test_version_2_records_settings_input_digests_and_the_input_end() -> None:
    shard = ShardRecord("shard-000000.tar", 4, 4096, "ab" * 32, 0, 4, input_digest="d4")
    manifest = Manifest((shard,), {"inputs": "urls.txt"}, {"key_width": 9}, InputEnd(4, "d4"))
    data = json.loads(manifest.to_json())
    assert (data["version"], data["settings"], data["input_end"]) == (
        2,
        {"key_width": 9},
        {"end": 4, "input_digest": "d4"},
    )
    assert data["shards"][0]["input_digest"] == "d4"
    assert Manifest.from_json(manifest.to_json()) == manifest
    moved_on = manifest.with_shard(ShardRecord("shard-000001.tar", 1, 1024, "cd" * 32, 4, 5))
    assert (moved_on.input_end, moved_on.settings, VERSION) == (None, {"key_width": 9}, 2)


def test_a_version_1_manifest_is_still_read_and_says_so() -> None:
    text = (
        '{"format": "aioloader-shards", "version": 1, "meta": {"inputs": "u.txt"}, "shards": ['
        '{"name": "a.tar", "samples": 1, "bytes": 1024, "sha256": "00", "first": 0, "end": 1}]}'
    )
    manifest = Manifest.from_json(text)
    assert (manifest.version, manifest.end, dict(manifest.settings)) == (1, 1, {})
    assert manifest.shards[0].input_digest is None
