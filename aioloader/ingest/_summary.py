"""The account an ingestion gives at the end: what came in, what went out, how fast."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ("IngestSummary",)


@dataclass(frozen=True)
class IngestSummary:
    """What one ingestion run did.

    Attributes:
        ok: Inputs written as samples by this run.
        failed: Inputs written as failure records by this run.
        failures: ``failed`` by reason.
        resumed_from: Inputs already committed when the run started (skipped).
        bytes_fetched: Body bytes fetched by this run.
        bytes_written: Shard bytes committed by this run.
        shards: Shards in the manifest at the end (resumed ones included).
        seconds: Wall time of the run.
        destination: Where the shards are.
    """

    ok: int
    failed: int
    failures: Mapping[str, int]
    resumed_from: int
    bytes_fetched: int
    bytes_written: int
    shards: int
    seconds: float
    destination: str

    @property
    def inputs(self) -> int:
        """Inputs this run handled (``ok + failed``)."""
        return self.ok + self.failed

    @property
    def items_per_second(self) -> float:
        """Inputs handled per second of wall time."""
        return self.inputs / self.seconds if self.seconds > 0 else 0.0

    def format(self) -> str:
        """A few lines for people."""
        lines = [
            f"ingested {self.inputs:,} inputs in {self.seconds:.1f} s "
            f"({self.items_per_second:,.1f} items/s): {self.ok:,} ok, {self.failed:,} failed"
        ]
        if self.failures:
            reasons = ", ".join(f"{name} {count:,}" for name, count in self.failures.items())
            lines.append(f"failed by reason: {reasons}")
        if self.resumed_from:
            lines.append(f"resumed: inputs before position {self.resumed_from:,} were committed")
        lines.append(
            f"fetched {self.bytes_fetched / 1e6:,.1f} MB; wrote {self.bytes_written / 1e6:,.1f} "
            f"MB; {self.shards:,} shards in {self.destination}"
        )
        return "\n".join(lines)
