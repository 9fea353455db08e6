"""The manifest of a shard set: which shards are committed, what each holds, what it covers.

A shard is listed only once its object is complete, so a reader that trusts the manifest
never sees a half-written shard. Each record may also say which input positions the shard
covers (``[first, end)``, each position either a sample in the shard or one of its failure
records). Records cover consecutive ranges, so the manifest's ``end`` is the resume point
of an ingestion: every input before it is committed exactly once, none after it is.

Resume checks (``version`` 2): ``settings`` holds every setting that decides the output
(a resumed writer refuses other values, naming them); each shard record may carry
``input_digest``, the running hash of the inputs ``[start, end)`` (see
``aioloader.ingest``), so a resume can tell whether its input still begins as the
committed one did; ``input_end`` says the run reached the end of its input there (a
longer input then resumes only when the user allows appended inputs).

The JSON layout (``version`` 2; version 1 had no ``settings``, ``input_end`` or
``input_digest``: it is still read, but not resumed)::

    {"format": "aioloader-shards", "version": 2, "meta": {...}, "settings": {...},
     "input_end": {"end": 1000, "input_digest": "..."} or null,
     "shards": [
       {"name": "shard-000000.tar", "samples": 998, "failed": 2, "bytes": 10485760,
        "sha256": "...", "first": 0, "end": 1000, "input_digest": "..."},
       ...]}

Beside each shard lie ``{name}.index.json`` (its ``ShardIndex``, so readers need not scan
it) and, when ``failed > 0``, ``{name}.failures.jsonl`` (one ``FailureRecord`` a line).
Both are written before the manifest lists the shard.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ("FORMAT", "VERSION", "FailureRecord", "InputEnd", "Manifest", "ShardRecord")

FORMAT = "aioloader-shards"
VERSION = 2
_READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class FailureRecord:
    """An input that produced no sample: its position, why, and what is known of it.

    Attributes:
        position: The input's position (0-based), or None when the writer counts none.
        reason: Why it failed ("status", "timeout", "decode", ...).
        detail: A human-readable account ("HTTP 404").
        key: The sample key it would have had.
        extra: JSON-serialisable facts (the URL, the input's metadata).
    """

    position: int | None
    reason: str
    detail: str = ""
    key: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        out: dict[str, Any] = {"position": self.position, "reason": self.reason}
        if self.detail:
            out["detail"] = self.detail
        if self.key is not None:
            out["key"] = self.key
        if self.extra:
            out["extra"] = dict(self.extra)
        return out

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> FailureRecord:
        """Inverse of ``to_dict``."""
        position = data.get("position")
        return FailureRecord(
            position=None if position is None else int(position),
            reason=str(data["reason"]),
            detail=str(data.get("detail", "")),
            key=None if data.get("key") is None else str(data["key"]),
            extra=dict(data.get("extra") or {}),
        )


@dataclass(frozen=True)
class ShardRecord:
    """One committed shard.

    Attributes:
        name: The shard's file or object name, relative to the destination.
        samples: Samples in the shard.
        bytes: Size of the shard in bytes.
        sha256: Hex SHA-256 of the shard's bytes.
        first: First input position covered, or None when positions are not tracked.
        end: One past the last input position covered, or None.
        failed: Inputs in ``[first, end)`` that produced no sample; their records are in
            the sidecar ``{name}.failures.jsonl``.
        input_digest: The running hash of the inputs up to ``end`` (None: not tracked).
    """

    name: str
    samples: int
    bytes: int
    sha256: str
    first: int | None = None
    end: int | None = None
    failed: int = 0
    input_digest: str | None = None

    @property
    def index_name(self) -> str:
        """Name of the shard's prebuilt index (``ShardIndex`` JSON)."""
        return f"{self.name}.index.json"

    @property
    def failures_name(self) -> str:
        """Name of the shard's failure records (JSON lines), written when ``failed > 0``."""
        return f"{self.name}.failures.jsonl"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        out: dict[str, Any] = {
            "name": self.name,
            "samples": self.samples,
            "failed": self.failed,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "first": self.first,
            "end": self.end,
        }
        if self.input_digest is not None:
            out["input_digest"] = self.input_digest
        return out

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> ShardRecord:
        """Inverse of ``to_dict``."""
        first, end = data.get("first"), data.get("end")
        return ShardRecord(
            name=str(data["name"]),
            samples=int(data["samples"]),
            bytes=int(data["bytes"]),
            sha256=str(data["sha256"]),
            first=None if first is None else int(first),
            end=None if end is None else int(end),
            failed=int(data.get("failed", 0)),
            input_digest=None if data.get("input_digest") is None else str(data["input_digest"]),
        )


@dataclass(frozen=True)
class InputEnd:
    """Where a run found the end of its input: the position and the running hash there."""

    end: int
    input_digest: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"end": self.end, "input_digest": self.input_digest}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> InputEnd:
        """Inverse of ``to_dict``."""
        return InputEnd(int(data["end"]), str(data["input_digest"]))


@dataclass(frozen=True)
class Manifest:
    """The committed shards of a destination, in commit order, and the run's facts.

    Attributes:
        shards: The committed shards, in order.
        meta: Facts for people (the input's name, ...); not compared on resume.
        settings: The settings that decide the output; a resume must match them.
        input_end: Set when a run reached the end of its input (None: not reached).
        version: The format version the manifest was read in (``VERSION`` when new).
    """

    shards: tuple[ShardRecord, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    input_end: InputEnd | None = None
    version: int = VERSION

    @property
    def end(self) -> int:
        """One past the last input position committed (0 when none is)."""
        return next((r.end for r in reversed(self.shards) if r.end is not None), 0)

    @property
    def total_samples(self) -> int:
        """Samples in all committed shards."""
        return sum(record.samples for record in self.shards)

    @property
    def total_bytes(self) -> int:
        """Bytes in all committed shards."""
        return sum(record.bytes for record in self.shards)

    @property
    def total_failed(self) -> int:
        """Failure records in all committed shards."""
        return sum(record.failed for record in self.shards)

    @property
    def names(self) -> tuple[str, ...]:
        """Names of the committed shards, in order."""
        return tuple(record.name for record in self.shards)

    def with_shard(self, record: ShardRecord) -> Manifest:
        """This manifest with ``record`` appended (and no ``input_end``: it moved on)."""
        return replace(self, shards=(*self.shards, record), input_end=None)

    def with_input_end(self, input_end: InputEnd | None) -> Manifest:
        """This manifest with ``input_end`` set."""
        return replace(self, input_end=input_end)

    def to_json(self) -> str:
        """JSON text in the current ``VERSION`` (one line per shard record, for people)."""
        head = json.dumps(
            {
                "format": FORMAT,
                "version": VERSION,
                "meta": dict(self.meta),
                "settings": dict(self.settings),
                "input_end": None if self.input_end is None else self.input_end.to_dict(),
            }
        )
        records = ",\n".join(json.dumps(r.to_dict(), separators=(",", ":")) for r in self.shards)
        return head[:-1] + ', "shards": [\n' + records + "\n]}\n"

    @staticmethod
    def from_json(text: str | bytes) -> Manifest:
        """Parse ``to_json`` output; raises ``ValueError`` naming what is wrong."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the manifest is not valid JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"the manifest's format must be {FORMAT!r} but got {data!r:.80}")
        version = data.get("version")
        if version not in _READABLE_VERSIONS:
            raise ValueError(
                f"the manifest's version must be one of {_READABLE_VERSIONS} but got {version!r}"
            )
        try:
            shards = tuple(ShardRecord.from_dict(r) for r in data["shards"])
            end = data.get("input_end")
            input_end = None if end is None else InputEnd.from_dict(end)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"the manifest has a malformed record: {exc!r}") from None
        meta, settings = dict(data.get("meta") or {}), dict(data.get("settings") or {})
        return Manifest(shards, meta, settings, input_end, int(version))
