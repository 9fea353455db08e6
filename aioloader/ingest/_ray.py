"""Ingestion split over Ray tasks: one task per input shard, manifests merged at the end.

    import ray
    ray.init(address="auto")                    # a running cluster (or ray.init() locally)
    summary = ingest_on_ray("urls.parquet", "shards", store=S3Store("bucket"),
                            inputs_per_part=100_000, image=ImageOptions(size=256))

The inputs are cut into parts: consecutive position ranges ``[start, stop)``. Each part is
one Ray task running the ordinary ``ingest`` with ``start``/``stop``, so its samples keep
their global keys (the zero-padded input position), and writing to its own prefix
``part-00003/`` with its own manifest. When every task is done, ``merge_parts`` writes
one manifest at the output's root listing every part's shards (``part-00003/shard-000000.tar``)
in input order, after checking that the parts cover ``[0, n)`` with no gap and no overlap.

Exactly once: a part is resumable on its own (its manifest's end is its checkpoint), so a
task that Ray retries after a lost worker, or the whole call made again after the driver
died, continues each part where its manifest ends; finished parts do nothing. The merged
manifest is written last, atomically, and only when every part is complete, so it lists
every input exactly once (``open_shards`` and ``read_failures`` read it like any other).

``ray`` is imported only when ``ingest_on_ray`` runs (``pip install 'aioloader[ray]'``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import ObjectNotFoundError
from ..core import at_least, at_least_or_none, instance_not_bool
from ..sinks import (
    MANIFEST_NAME,
    Destination,
    LocalDestination,
    Manifest,
    ShardRecord,
    StoreDestination,
    make_destination,
    read_manifest,
)
from ._inputs import count_inputs
from ._summary import IngestSummary

__all__ = ("ingest_on_ray", "merge_parts", "part_name")

PART_PATTERN = "part-{:05d}"


def part_name(part: int) -> str:
    """The prefix (sub-folder) of part ``part``: ``part-00003``."""
    return PART_PATTERN.format(part)


def _child(output: str | os.PathLike[str], store: Any, name: str) -> str:
    if store is None:
        return os.path.join(os.fspath(output), name)
    prefix = str(output).strip("/")
    return f"{prefix}/{name}" if prefix else name


class _Offset:
    """``start`` placeholders, then ``items``: a slice that keeps its global positions.

    ``ingest`` numbers an iterable's items by their rank and skips those before ``start``,
    so a task given only its slice still writes keys and positions of the whole list.
    """

    def __init__(self, items: Sequence[Any], start: int) -> None:
        self.items = items
        self.start = start

    def __iter__(self) -> Iterator[Any]:
        yield from (None for _ in range(self.start))
        yield from self.items


@dataclass(frozen=True)
class _Part:
    """What one task ingests: its inputs (the file, or its slice), where it writes, and its
    input positions ``[start, stop)``; the store and the options are the same for every part."""

    inputs: Any
    output: str
    start: int
    stop: int


def _run_part(
    part: _Part, store: Any, fetcher_options: Mapping[str, Any], options: Mapping[str, Any]
) -> IngestSummary:
    """One Ray task: ``ingest`` of ``part`` (it resumes where the part's manifest ends)."""
    import anyio

    from ..sources import HttpFetcher
    from ._pipeline import ingest

    async def run() -> IngestSummary:
        async with HttpFetcher(**fetcher_options) as fetcher:
            return await ingest(
                part.inputs,
                part.output,
                store=store,
                start=part.start,
                stop=part.stop,
                fetcher=fetcher,
                **options,
            )

    summary: IngestSummary = anyio.run(run)
    return summary


def merge_parts(
    output: str | os.PathLike[str] | Destination,
    parts: Sequence[str],
    *,
    store: Any = None,
    inputs: int | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Manifest:
    """Write one manifest at ``output`` listing the shards of every part, in order.

    Args:
        output: The folder (or store prefix) holding the parts' prefixes.
        parts: The parts' prefixes under ``output``, in input order (``part_name(i)``).
        store: The obstore store, or None for a local folder.
        inputs: How many inputs the parts must cover (``[0, inputs)``); None skips the
            check of the last end.
        meta: Facts stored in the merged manifest (``parts`` is added).

    Raises:
        ValueError: A part's manifest leaves a gap or an overlap (a part is unfinished).
    """
    where = make_destination(output, store)
    shards: list[ShardRecord] = []
    position = 0
    for name in parts:
        manifest = _part_manifest(where, name)
        for record in manifest.shards:
            if record.first is None or record.end is None:
                raise ValueError(
                    f"part {name!r} has a shard without input positions ({record.name!r}); "
                    "parts must be written by ingest"
                )
            if record.first != position:
                raise ValueError(
                    f"part {name!r} must continue at input position {position} but its shard "
                    f"{record.name!r} starts at {record.first} (an unfinished or foreign part)"
                )
            position = record.end
            shards.append(_prefixed(record, name))
    if inputs is not None and position != inputs:
        raise ValueError(
            f"the parts must cover inputs [0, {inputs}) but they end at {position} "
            "(an unfinished part: run the same ingestion again to finish it)"
        )
    merged = Manifest(tuple(shards), {**dict(meta or {}), "parts": list(parts)})
    where.put_bytes(MANIFEST_NAME, merged.to_json().encode("utf-8"))
    return merged


def _part_manifest(where: Destination, name: str) -> Manifest:
    if isinstance(where, LocalDestination):
        part: Destination = LocalDestination(where.folder / name)
    elif isinstance(where, StoreDestination):
        part = StoreDestination(where.store, where.key(name))
    else:
        raise TypeError(f"output must be a local folder or a store prefix but got {where!r}")
    try:
        return read_manifest(part)
    except ObjectNotFoundError:  # a part with no inputs commits nothing
        return Manifest()


def _prefixed(record: ShardRecord, part: str) -> ShardRecord:
    fields = {**record.to_dict(), "name": f"{part}/{record.name}"}
    return ShardRecord.from_dict(fields)


def ingest_on_ray(
    inputs: str | os.PathLike[str] | Iterable[Any],
    output: str | os.PathLike[str],
    *,
    store: Any = None,
    parts: int | None = None,
    inputs_per_part: int = 10_000,
    cpus_per_part: float = 1.0,
    max_retries: int = 3,
    fetcher_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> IngestSummary:
    """``ingest`` split over Ray tasks, one per input part; one merged manifest at the end.

    Call ``ray.init`` first (``address="auto"`` for a cluster); without it Ray starts a
    local runtime. On a cluster of several machines give ``store`` (object storage), or a
    folder every node sees: each task writes where it runs.

    Args:
        inputs: A file of inputs (``.txt``, ``.jsonl``, ``.parquet``; every task reads
            it, so on a cluster it must be a path every node sees) or an iterable of URLs,
            mappings or ``InputRecord`` (the driver slices it and ships each task its part).
        output: A local folder, or a key prefix of ``store``; part ``i`` writes under
            ``part-0000i/`` and the merged ``manifest.json`` lands at the root.
        store: An obstore store (it must pickle: S3, GCS, Azure and local stores do).
        parts: How many tasks; None: ``ceil(inputs / inputs_per_part)``.
        inputs_per_part: Inputs per task when ``parts`` is None.
        cpus_per_part: CPUs Ray reserves for each task; also its default ``threads``.
        max_retries: Times Ray runs a task again after its worker died (it resumes).
        fetcher_options: Keyword arguments of each task's ``HttpFetcher``.
        options: Keyword arguments of ``ingest`` (``image``, ``max_in_flight``,
            ``shard_samples``, ...); not ``start``, ``stop``, ``fetcher`` or ``progress``.

    Returns:
        The parts' summaries added up; ``seconds`` is the wall time of the whole call.
    """
    import ray

    started = time.perf_counter()
    for name in ("start", "stop", "fetcher", "progress", "store"):
        if name in options:
            raise TypeError(f"ingest_on_ray() sets {name!r} itself; it must not be passed")
    if not instance_not_bool("cpus_per_part", cpus_per_part, (int, float), "a number > 0") > 0:
        raise ValueError(f"cpus_per_part must be a number > 0 but got {cpus_per_part!r}")
    options.setdefault("threads", max(1, math.ceil(cpus_per_part)))
    if isinstance(inputs, (str, os.PathLike)):
        total = count_inputs(inputs)
        items: Sequence[Any] | None = None
    else:
        items = list(inputs)
        total = len(items)
    count = _part_count(total, parts, inputs_per_part)
    bounds = [(total * i // count, total * (i + 1) // count) for i in range(count)]
    names = [part_name(i) for i in range(count)]
    remote = ray.remote(num_cpus=cpus_per_part, max_retries=max_retries)(_run_part)
    fetch = dict(fetcher_options or {})
    futures = []
    for name, (start, stop) in zip(names, bounds, strict=True):
        task_inputs = inputs if items is None else _Offset(items[start:stop], start)
        part = _Part(task_inputs, _child(output, store, name), start, stop)
        futures.append(remote.remote(part, store, fetch, options))
    summaries: list[IngestSummary] = ray.get(futures)
    described = os.fspath(inputs) if isinstance(inputs, (str, os.PathLike)) else "<iterable>"
    merged = merge_parts(
        output, names, store=store, inputs=total, meta={"inputs": described, "count": total}
    )
    failures: dict[str, int] = {}
    for summary in summaries:
        for reason, n in summary.failures.items():
            failures[reason] = failures.get(reason, 0) + n
    return IngestSummary(
        ok=sum(s.ok for s in summaries),
        failed=sum(s.failed for s in summaries),
        failures=dict(sorted(failures.items(), key=lambda item: (-item[1], item[0]))),
        resumed_from=sum(s.resumed_from for s in summaries),
        bytes_fetched=sum(s.bytes_fetched for s in summaries),
        bytes_written=sum(s.bytes_written for s in summaries),
        shards=len(merged.shards),
        seconds=time.perf_counter() - started,
        destination=make_destination(output, store).describe(""),
    )


def _part_count(total: int, parts: int | None, inputs_per_part: int) -> int:
    count = at_least_or_none("parts", parts, 1)
    if count is not None:
        return max(1, min(count, total))
    return max(1, math.ceil(total / at_least("inputs_per_part", inputs_per_part, 1)))
