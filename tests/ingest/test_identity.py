"""The input fingerprint and the settings a resume must match."""

from __future__ import annotations

import pytest

from aioloader.ingest import ImageOptions, InputRecord
from aioloader.ingest._identity import InputTrail, check_committed_inputs, output_settings
from aioloader.sinks import Manifest, ResumeMismatchError, ShardRecord


def _digests(records: list[InputRecord]) -> list[str]:
    trail = InputTrail()
    return [trail.add(record) for record in records]


def _records(urls: list[str], start: int = 0) -> list[InputRecord]:
    return [InputRecord(start + i, url) for i, url in enumerate(urls)]


def test_the_trail_is_a_running_hash_of_position_url_and_fields() -> None:
    base = _digests([InputRecord(0, "a"), InputRecord(1, "b", {"caption": "x"})])
    assert base == _digests([InputRecord(0, "a"), InputRecord(1, "b", {"caption": "x"})])
    assert [len(digest) for digest in set(base)] == [64, 64]
    assert _digests([InputRecord(0, "a"), InputRecord(1, "b", {"caption": "y"})])[1] != base[1]
    assert _digests([InputRecord(0, "a"), InputRecord(2, "b", {"caption": "x"})])[1] != base[1]
    assert _digests([InputRecord(0, "z"), InputRecord(1, "b", {"caption": "x"})])[1] != base[1]


def test_settings_name_each_image_option() -> None:
    settings = output_settings(
        url_field="url",
        text_field=None,
        image=ImageOptions(size=64),
        start=0,
        key_width=9,
        content_types=("image/",),
        max_body_bytes=1024,
    )
    assert settings == {
        "url_field": "url",
        "text_field": None,
        "start": 0,
        "key_width": 9,
        "content_types": ["image/"],
        "max_body_bytes": 1024,
        "image.size": 64,
        "image.resize_mode": "border",
        "image.format": None,
        "image.quality": 95,
        "image.only_if_bigger": False,
        "image.reduced_decode": True,
        "image.jpeg_encoder": "simplejpeg",  # the ingest extra has it: the GIL-free one
    }
    png = output_settings(
        url_field="url",
        text_field=None,
        image=ImageOptions(size=64, format="png"),
        start=0,
        key_width=9,
        content_types=None,
        max_body_bytes=None,
    )
    assert "image.jpeg_encoder" not in png  # no JPEG is encoded


def _manifest(urls: list[str], ends: list[int], start: int = 0) -> Manifest:
    digests = _digests(_records(urls, start))
    shards, first = [], start
    for number, end in enumerate(ends):
        name = f"shard-{number:06d}.tar"
        shards.append(ShardRecord(name, end - first, 1024, "00", first, end, 0,
                                  digests[end - start - 1]))  # fmt: skip
        first = end
    return Manifest(tuple(shards))


def test_the_committed_prefix_is_checked_shard_by_shard() -> None:
    urls = [f"http://h/{i}" for i in range(10)]
    manifest = _manifest(urls[:6], [13, 16], start=10)
    records = iter(_records(urls, start=10))
    trail, following = check_committed_inputs(
        records, manifest, start=10, allow_appended_input=False, where="m"
    )
    assert (trail.count, following, next(records)) == (
        6,
        InputRecord(16, urls[6]),
        InputRecord(17, urls[7]),
    )
    edited = [*urls[:4], "http://h/other", *urls[5:]]
    with pytest.raises(ResumeMismatchError, match=r"inputs at positions 13\.\.15 \(shard-000001"):
        check_committed_inputs(
            iter(_records(edited, 10)), manifest, start=10, allow_appended_input=False, where="m"
        )
    with pytest.raises(ResumeMismatchError) as short:
        check_committed_inputs(
            iter(_records(urls[:4], 10)), manifest, start=10, allow_appended_input=False, where="m"
        )
    assert str(short.value) == (
        "cannot resume from m: its shards cover inputs 10..15 but the input ends at position "
        "14; resume with the same input, or write to a new output"
    )
