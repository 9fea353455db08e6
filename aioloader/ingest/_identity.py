"""What an ingestion resumes: a fingerprint of its input and of the settings that decide it.

A resume must continue the same job. The manifest records (see ``aioloader.sinks``):

- the settings that decide the output (``output_settings``): the writer refuses a resume
  whose settings differ, naming each one, old and new;
- with each committed shard, the running hash of the inputs up to the shard's end
  (``InputTrail``: SHA-256 over ``(position, URL, fields)`` of every input from ``start``);
  a resume hashes the inputs it skips and compares at every committed shard's end
  (``check_committed_inputs``), so an input changed anywhere in what was committed is
  refused, naming the first shard whose inputs differ;
- where a run found the end of its input; an input that grew only at its end resumes
  after that only when allowed (``allow_appended_input``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from .._errors import ResumeMismatchError
from ..sinks import Manifest
from ._images import ImageOptions, jpeg_encoder
from ._inputs import InputRecord

__all__ = ("InputTrail", "check_committed_inputs", "output_settings")

_SEED = b"aioloader-inputs-v1\n"


class InputTrail:
    """The running hash of a sequence of inputs, in order (one ``add`` per input)."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256(_SEED)
        self.count = 0
        self.digest = self._hash.hexdigest()

    def add(self, record: InputRecord) -> str:
        """Fold in ``record`` (position, URL, fields); the hex digest of every input so far."""
        entry = [record.position, record.url, dict(record.meta)]
        text = json.dumps(entry, sort_keys=True, separators=(",", ":"), default=str)
        self._hash.update(text.encode("utf-8", "surrogatepass") + b"\n")
        self.count += 1
        self.digest = self._hash.hexdigest()
        return self.digest


def output_settings(
    *,
    url_field: str,
    text_field: str | None,
    image: ImageOptions | None,
    start: int,
    key_width: int,
    content_types: tuple[str, ...] | None,
    max_body_bytes: int | None,
) -> dict[str, Any]:
    """The settings that decide an ingestion's output, as the manifest records them."""
    settings: dict[str, Any] = {
        "url_field": url_field,
        "text_field": text_field,
        "start": start,
        "key_width": key_width,
        "content_types": None if content_types is None else list(content_types),
        "max_body_bytes": max_body_bytes,
    }
    if image is None:
        settings["image"] = None
    else:
        settings.update({f"image.{name}": value for name, value in vars(image).items()})
        if image.touches_pixels and image.format in (None, "jpeg"):
            settings["image.jpeg_encoder"] = jpeg_encoder()
    return settings


def check_committed_inputs(
    records: Iterator[InputRecord],
    manifest: Manifest,
    *,
    start: int,
    allow_appended_input: bool,
    where: str,
) -> tuple[InputTrail, InputRecord | None]:
    """Hash the inputs the manifest says are committed, checking them shard by shard.

    Args:
        records: The inputs from position ``start`` on, in order (consumed up to the first
            one not committed).
        manifest: The manifest being resumed (an empty one checks nothing).
        start: The ingestion's first position.
        allow_appended_input: Accept an input that goes on past where an earlier run
            found its end.
        where: The manifest, for messages.

    Returns:
        The trail over the committed inputs, and the first input not committed (None when
        the input holds no more).

    Raises:
        ResumeMismatchError: The input differs from the one the shards were written from.
    """
    trail = InputTrail()
    resume_at = manifest.end if manifest.shards else start
    checkpoints: list[tuple[int, int, str | None, str]] = []
    first = start
    for shard in manifest.shards:
        if shard.end is not None:
            checkpoints.append((first, shard.end, shard.input_digest, shard.name))
            first = shard.end
    turn = 0
    following: InputRecord | None = None
    for record in records:
        if record.position >= resume_at:
            following = record
            break
        digest = trail.add(record)
        while turn < len(checkpoints) and checkpoints[turn][1] == record.position + 1:
            low, end, expected, name = checkpoints[turn]
            if expected is not None and digest != expected:
                raise ResumeMismatchError(
                    f"cannot resume from {where}: the input is not the one its shards were "
                    f"written from: the inputs at positions {low}..{end - 1} ({name}) differ "
                    "(a URL or a field changed, or inputs were inserted or removed before "
                    "them); resume with the same input, or write to a new output"
                )
            turn += 1
    if trail.count < resume_at - start:
        raise ResumeMismatchError(
            f"cannot resume from {where}: its shards cover inputs {start}..{resume_at - 1} "
            f"but the input ends at position {start + trail.count}; resume with the same "
            "input, or write to a new output"
        )
    ended = manifest.input_end
    if following is not None and ended is not None and not allow_appended_input:
        raise ResumeMismatchError(
            f"cannot resume from {where}: the run that wrote it reached the end of its "
            f"input at position {ended.end}, and this input goes on past it (inputs were "
            "appended); pass allow_appended_input=True (--allow-appended-input) to "
            "ingest the new inputs into the same output"
        )
    return trail, following
