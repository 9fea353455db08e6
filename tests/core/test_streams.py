"""aioloader.core._streams: one id per use of randomness, pinned to its value."""

from __future__ import annotations

from aioloader.core import RngStream, derive, plan_batch
from aioloader.core._samplers import SequentialSampler


def test_every_stream_id_is_pinned() -> None:
    assert {stream.name: int(stream) for stream in RngStream} == {
        "TRANSFORM": 0,
        "AUGMENT": 1,
        "PACK": 2,
        "SHUFFLE": 101,
        "MIXING": 102,
        "BUCKET_ORDER": 103,
        "BUCKET_PLACE": 104,
        "BLOCK_SHARD_ORDER": 105,
        "BLOCK_ITEM_ORDER": 106,
        "WEIGHTED": 107,
        "RETRY_JITTER": 201,
        "SHUFFLE_BUFFER": 202,
        "REPLACE_SAMPLE": 203,
    }


def test_stream_ids_are_unique() -> None:
    values = [member.value for member in RngStream.__members__.values()]
    assert len(values) == len(set(values))
    assert len(RngStream.__members__) == len(RngStream)  # no aliases


def test_no_stream_id_is_in_the_users_range() -> None:
    assert [s for s in RngStream if 3 <= s <= 100] == []


def test_a_stream_member_derives_what_its_integer_derives() -> None:
    assert derive(7, 1, 2, 3, RngStream.SHUFFLE) == derive(7, 1, 2, 3, 101)
    plan = plan_batch(SequentialSampler(8, 4), 7, 1)
    assert plan.augment_keys().tolist() == [derive(7, 0, 1, slot, 1) for slot in range(4)]
