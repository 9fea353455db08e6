"""An input's outcome (a sample's fields or a failure record) and the ``Recorder`` that
writes outcomes to the shards in input order.

The recorder folds each input into the running hash, writes its sample or failure record,
commits a shard once it holds ``shard_samples`` records (failures count, so an outage still
commits), gives the heap's freed pages back after each commit, and counts what it did for
the run's ``IngestSummary``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from .._progress import Progress
from ..sinks import FailureRecord, ShardRecord, TarShardWriter
from ._identity import InputTrail
from ._inputs import InputRecord
from ._summary import IngestSummary

if TYPE_CHECKING:
    from ..sources import FetchResult

__all__ = ("InputOutcome", "Recorder", "noting")


@dataclass(frozen=True)
class InputOutcome:
    """What became of one input: its sample's fields, or a failure record."""

    record: InputRecord
    fetched: FetchResult
    fields: dict[str, bytes] | None
    failure: FailureRecord | None

    def held_bytes(self) -> int:
        """Bytes this outcome keeps alive: its fields, and the fetched body if not one."""
        fields = self.fields or {}
        body = self.fetched.body
        kept = sum(len(value) for value in fields.values())
        if body is not None and not any(value is body for value in fields.values()):
            kept += len(body)
        return kept


def noting(
    on_commit: Callable[[ShardRecord], None] | None, committed: list[ShardRecord]
) -> Callable[[ShardRecord], None]:
    """``on_commit`` that also appends each record to ``committed``."""

    def note(record: ShardRecord) -> None:
        committed.append(record)
        if on_commit is not None:
            on_commit(record)

    return note


@dataclass
class Recorder:
    """Writes outcomes in input order, commits full shards and counts what it wrote.

    Attributes:
        writer: the shard writer.
        trail: the running hash of the inputs, resumed where the manifest ends.
        key: a sample's key from its input position.
        shard_samples: records (samples and failures) per shard.
        start: the first input position of the run's share.
        committed: the shards committed since the last trim (``noting`` fills it).
        trim: gives the C heap's free memory back (None off glibc).
        bar: the progress bar, or None.
        resumed_from: the input position the run resumed at.
        bytes_before: the manifest's bytes when the run began.
    """

    writer: TarShardWriter
    trail: InputTrail
    key: Callable[[int], str]
    shard_samples: int
    start: int
    committed: list[ShardRecord]
    trim: Callable[[], bool] | None
    bar: Progress | None = None
    ok: int = 0
    failed: int = 0
    fetched: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    resumed_from: int = field(init=False)
    bytes_before: int = field(init=False)

    def __post_init__(self) -> None:
        self.resumed_from = self.writer.next_position
        self.bytes_before = self.writer.manifest.total_bytes

    async def record(self, outcome: InputOutcome) -> None:
        """Write ``outcome`` (the next input in order), committing a full shard."""
        writer = self.writer
        digest = self.trail.add(outcome.record)
        if outcome.failure is not None:
            writer.record_failure(outcome.failure, input_digest=digest)
            self.failed += 1
            self.reasons[outcome.failure.reason] = self.reasons.get(outcome.failure.reason, 0) + 1
        else:
            assert outcome.fields is not None
            position = outcome.record.position
            key = self.key(position)
            await writer.write(key, outcome.fields, position=position, input_digest=digest)
            self.ok += 1
        if self._pending_records() >= self.shard_samples:
            await writer.commit()  # failures count: an outage still commits
        self.fetched += len(outcome.fetched.body or b"")
        if self.committed and self.trim is not None:  # a shard's memory goes back to the system
            self.committed.clear()
            await anyio.to_thread.run_sync(self.trim)
        if self.bar is not None:
            self.bar.advance(note=f"ok {self.ok:,} failed {self.failed:,}")

    def _pending_records(self) -> int:
        """Inputs recorded (samples and failures) in the shard not yet committed."""
        manifest = self.writer.manifest
        return self.writer.next_position - (manifest.end if manifest.shards else self.start)

    def summary(self, started: float) -> IngestSummary:
        """The run's account, ``started`` at that ``time.perf_counter()``."""
        manifest = self.writer.manifest
        reasons = sorted(self.reasons.items(), key=lambda item: (-item[1], item[0]))
        return IngestSummary(
            ok=self.ok,
            failed=self.failed,
            failures=dict(reasons),
            resumed_from=self.resumed_from - self.start,
            bytes_fetched=self.fetched,
            bytes_written=manifest.total_bytes - self.bytes_before,
            shards=len(manifest.shards),
            seconds=time.perf_counter() - started,
            destination=self.writer.destination.describe(""),
        )
