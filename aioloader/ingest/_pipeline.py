"""Ingestion: URLs in, fetched and (optionally) resized, tar shards out, resumable exactly.

    summary = await ingest("urls.jsonl", "shards/", size=256, max_in_flight=256)

The pipeline: inputs (from the resume point on) -> a ``ReorderWindow`` that fetches and,
in worker threads, decodes and resizes -> the ``TarShardWriter``. Fetches run
concurrently and finish in any order, but the window hands results on in input order
(holding at most ``reorder_window`` inputs and ``reorder_bytes`` bytes), so every shard
covers a contiguous range of input positions and the manifest's end is an exact checkpoint.

Same job: the manifest records the settings that decide the output and, per shard, a
running hash of the inputs it covers (``aioloader.ingest._identity``); a resume with
other settings or another input is refused, naming what changed.

Exactly once: each input becomes one sample (key: its position, zero-padded) or one
failure record, in the shard that covers its position. A run killed at any moment leaves a
manifest of complete shards covering inputs ``[start, P)``; the same call again resumes at
``P``, overwriting what the killed run left unlisted. So the committed shards hold every
input once: no duplicate, no gap.

Bounded by inputs, not samples: a shard is committed once it holds ``shard_samples``
records, samples and failure records together. So during an outage (every fetch failing)
shards of failure records are still committed, the manifest's resume point moves on,
the records waiting for a commit stay under ``shard_samples``, and a run killed at any
moment redoes fewer than ``shard_samples`` inputs when resumed.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from .._progress import Progress
from ..core import at_least_or_none, positive
from ..engine import BuildThreads
from ..sinks import FailureRecord, InputEnd, ShardRecord, TarShardWriter
from ..sources import FetchResult, HttpFetcher
from ._extras import require_ingest_packages
from ._identity import InputTrail, check_committed_inputs, output_settings
from ._images import ImageOptions, process_image
from ._inputs import InputRecord, count_inputs, jsonable, read_inputs
from ._memory import heap_trimmer
from ._outcomes import InputOutcome, Recorder, noting
from ._summary import IngestSummary
from ._window import ReorderWindow

__all__ = ("ingest", "ingest_sync")

_EXTENSIONS = {
    "image/jpeg": "jpg",
    "image/png": "png",
    "image/webp": "webp",
    "image/gif": "gif",
    "image/avif": "avif",
    "image/bmp": "bmp",
    "image/tiff": "tiff",
}
_CHUNK = 1024


def _records(
    inputs: str | os.PathLike[str] | Iterable[Any], url_field: str, start: int
) -> Iterator[InputRecord]:
    if isinstance(inputs, (str, os.PathLike)):
        yield from read_inputs(inputs, url_field=url_field, start=start)
        return
    for position, item in enumerate(inputs):
        if position < start:
            continue
        if isinstance(item, InputRecord):
            yield InputRecord(position, item.url, item.meta)
        elif isinstance(item, str):
            yield InputRecord(position, item)
        elif isinstance(item, Mapping) and isinstance(item.get(url_field), str):
            meta = {str(k): jsonable(v) for k, v in item.items() if k != url_field}
            yield InputRecord(position, item[url_field], meta)
        else:
            raise TypeError(
                f"inputs[{position}] must be a URL, a mapping with a {url_field!r} str field or "
                f"an InputRecord but got {item!r:.80}"
            )


@dataclass
class _Reading:
    """Whether the reader found the end of the input (not only ``stop``)."""

    exhausted: bool = False


async def _chunked(
    records: Iterator[InputRecord], stop: int | None, reading: _Reading
) -> AsyncIterator[InputRecord]:
    """The records, read ``_CHUNK`` at a time in a worker thread (file reads block)."""

    def take() -> list[InputRecord]:
        chunk = []
        for record in records:
            chunk.append(record)
            if len(chunk) == _CHUNK:
                break
        return chunk

    while True:
        chunk = await anyio.to_thread.run_sync(take)
        for record in chunk:
            if stop is not None and record.position >= stop:
                return
            yield record
        if len(chunk) < _CHUNK:
            reading.exhausted = True
            return


def _extension(result: FetchResult) -> str:
    known = _EXTENSIONS.get(result.content_type)
    if known:
        return known
    tail = result.final_url.split("?", 1)[0].rsplit("/", 1)[-1]
    suffix = tail.rsplit(".", 1)[-1].lower() if "." in tail else ""
    return suffix if suffix.isalnum() and 0 < len(suffix) <= 5 else "bin"


class _Worker:
    """Turns one input into its outcome: fetch, then decode and resize in a thread."""

    def __init__(
        self,
        fetcher: HttpFetcher,
        image: ImageOptions | None,
        text_field: str | None,
        key_width: int,
        threads: int | None,
        *,
        owns_fetcher: bool,
    ) -> None:
        self.fetcher = fetcher
        self.image = image
        self.text_field = text_field
        self.key_width = key_width
        self._thread_count = threads or os.cpu_count() or 1
        self._threads: BuildThreads | None = None
        self._owns_fetcher = owns_fetcher

    def key(self, position: int) -> str:
        return f"{position:0{self.key_width}d}"

    async def __call__(self, record: InputRecord) -> InputOutcome:
        key = self.key(record.position)
        result = await self.fetcher.fetch(record.url)
        extra = {"url": record.url, **record.meta}
        if result.body is None:
            reason = str(result.reason)
            failure = FailureRecord(record.position, reason, result.detail, key, extra)
            return InputOutcome(record, result, None, failure)
        meta: dict[str, Any] = {"key": key, "position": record.position, **extra}
        meta.update(status=result.status, final_url=result.final_url)
        text = record.meta.get(self.text_field) if self.text_field is not None else None
        if self.image is None or not self.image.touches_pixels:
            fields = _fields({_extension(result): result.body}, meta, text)
            return InputOutcome(record, result, fields, None)
        if self._threads is None:
            self._threads = BuildThreads(self._thread_count)
        try:  # the image and the sample's JSON are made in a thread: the loop only fetches
            fields = await self._threads.run(_image_fields, result.body, self.image, meta, text)
        except ValueError as exc:
            failure = FailureRecord(record.position, "decode", str(exc)[:200], key, extra)
            return InputOutcome(record, result, None, failure)
        return InputOutcome(record, result, fields, None)

    async def __aenter__(self) -> _Worker:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Join the image threads (every job has ended or was never started), then close
        the fetcher if it is the run's own."""
        threads, self._threads = self._threads, None
        if threads is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(threads.close)
        if self._owns_fetcher:
            await self.fetcher.aclose()


def _image_fields(
    body: bytes, options: ImageOptions, meta: dict[str, Any], text: Any
) -> dict[str, bytes]:
    """A sample's fields from its fetched image (``ValueError``: it does not decode)."""
    processed = process_image(body, options)
    meta.update(
        width=processed.width,
        height=processed.height,
        original_width=processed.original_width,
        original_height=processed.original_height,
    )
    return _fields({processed.extension: processed.data}, meta, text)


def _fields(fields: dict[str, bytes], meta: dict[str, Any], text: Any) -> dict[str, bytes]:
    """``fields`` with the caption (``txt``, when a string) and the JSON of ``meta``."""
    if isinstance(text, str):
        fields["txt"] = text.encode("utf-8")
    fields["json"] = json.dumps(meta, sort_keys=True, default=str).encode("utf-8")
    return fields


def _describe_inputs(inputs: Any) -> str:
    if isinstance(inputs, (str, os.PathLike)):
        return str(Path(inputs))
    return f"<{type(inputs).__name__}>"


async def ingest(
    inputs: str | os.PathLike[str] | Iterable[Any],
    output: str | os.PathLike[str],
    *,
    store: Any = None,
    url_field: str = "url",
    text_field: str | None = None,
    image: ImageOptions | None = None,
    fetcher: HttpFetcher | None = None,
    max_in_flight: int = 256,
    max_per_host: int = 16,
    reorder_window: int | None = None,
    reorder_bytes: int = 512 * 1024 * 1024,
    threads: int | None = None,
    shard_samples: int = 10_000,
    shard_bytes: int = 256 * 1024 * 1024,
    name_pattern: str = "shard-{:06d}.tar",
    start: int = 0,
    stop: int | None = None,
    key_width: int = 9,
    resume: bool = True,
    progress: bool = False,
    meta: Mapping[str, Any] | None = None,
    on_commit: Callable[[ShardRecord], None] | None = None,
    allow_appended_input: bool = False,
) -> IngestSummary:
    """Fetch every input's URL and write the results to tar shards, resumable exactly.

    Args:
        inputs: A file of inputs (``.txt`` URLs, ``.jsonl``, ``.parquet``; see
            ``read_inputs``), or an iterable of URLs, mappings or ``InputRecord``.
        output: A local folder, or a key prefix when ``store`` is given.
        store: An obstore store to write the shards to.
        url_field: The URL's field in JSONL, Parquet and mapping inputs.
        text_field: A field written as the sample's ``txt`` member (a caption).
        image: Resize and re-encode options; None writes bodies as fetched.
        fetcher: The ``HttpFetcher``; by default one with ``max_in_flight`` and
            ``max_per_host`` (a given fetcher is not closed here).
        max_in_flight: Requests in flight in all (default fetcher only).
        max_per_host: Requests in flight per host (default fetcher only).
        reorder_window: Inputs in flight or finished but waiting for an earlier one
            (default ``4 * max_in_flight``).
        reorder_bytes: Bytes of finished inputs waiting for an earlier one (default
            512 MiB); see ``ReorderWindow``. With a slow input at the head, the window
            fills behind it and waits until its deadline ends it.
        threads: Worker threads for image work (default: the CPU count).
        shard_samples: Records per shard: samples and failure records together (a shard
            is committed when it holds this many, so failures during an outage are
            committed too, and a resume redoes fewer than this many inputs).
        shard_bytes: Bytes per shard (roughly).
        name_pattern: Shard names, formatted with the shard number.
        start: First input position to ingest (a worker's share of a larger list).
        stop: One past the last position to ingest (None: to the end).
        key_width: Digits of the zero-padded position used as the sample key.
        resume: Continue a shard set the output's manifest describes. The input must
            begin as the committed one did (checked shard by shard with a running hash
            of positions, URLs and fields) and the settings that decide the output
            (fields, image options, ``start``, ``key_width``, the fetcher's content types
            and body limit) must be the same, else ``ResumeMismatchError`` says what
            changed; ``stop`` may differ, so a run can be extended. False refuses an
            output that has a manifest.
        progress: Draw a progress bar on standard error (when it is a terminal).
        meta: Extra facts to store in the manifest.
        on_commit: Called with each ``ShardRecord`` once the manifest lists it.
        allow_appended_input: Resume even when an earlier run reached the end of its
            input and this input goes on past it (it grew at its end).

    Returns:
        What the run did (``IngestSummary``).
    """
    started = time.perf_counter()
    window = await _checked_window(
        inputs, fetcher, image, start, stop, reorder_window, max_in_flight
    )
    active = fetcher or HttpFetcher(max_in_flight=max_in_flight, max_per_host=max_per_host)
    committed: list[ShardRecord] = []  # shards committed since the last trim of the heap
    writer = TarShardWriter(
        output,
        store=store,
        max_samples=shard_samples,
        max_bytes=shard_bytes,
        name_pattern=name_pattern,
        resume=resume,
        meta={"inputs": _describe_inputs(inputs), **dict(meta or {})},
        settings=_settings(active, url_field, text_field, image, start, key_width),
        start_position=start,
        on_commit=noting(on_commit, committed),
    )
    worker = _Worker(active, image, text_field, key_width, threads, owns_fetcher=fetcher is None)
    trail, records, reading = await _resume(
        writer, worker, inputs, url_field, start, allow_appended_input
    )
    recorder = Recorder(writer, trail, worker.key, shard_samples, start, committed, heap_trimmer())
    if progress:
        recorder.bar = await _progress_bar(inputs, stop, writer.next_position)
    reorder = ReorderWindow(
        worker, max_items=window, max_bytes=reorder_bytes, size_of=InputOutcome.held_bytes
    )
    async with worker, writer, reorder.open(_chunked(records, stop, reading)) as outcomes:
        async for outcome in outcomes:
            await recorder.record(outcome)
        if reading.exhausted:
            await writer.mark_input_end(InputEnd(writer.next_position, trail.digest))
    return recorder.summary(started)


async def _checked_window(
    inputs: Any,
    fetcher: HttpFetcher | None,
    image: ImageOptions | None,
    start: int,
    stop: int | None,
    reorder_window: int | None,
    max_in_flight: int,
) -> int:
    """Refuse what ``ingest`` cannot run; the reorder window's size in inputs."""
    require_ingest_packages(inputs, fetcher, image is not None and image.touches_pixels)
    if stop is not None and stop < start:
        raise ValueError(f"stop must be >= start ({start}) or None but got {stop}")
    window = at_least_or_none("reorder_window", reorder_window, 1)
    if window is None:
        window = 4 * positive("max_in_flight", max_in_flight)
    if isinstance(inputs, (str, os.PathLike)) and not await anyio.Path(inputs).is_file():
        raise FileNotFoundError(f"inputs must be a file of URLs but {str(inputs)!r} is not one")
    return window


def _settings(
    fetcher: HttpFetcher,
    url_field: str,
    text_field: str | None,
    image: ImageOptions | None,
    start: int,
    key_width: int,
) -> dict[str, Any]:
    """The settings that decide the output, as the manifest records them."""
    return output_settings(
        url_field=url_field,
        text_field=text_field,
        image=image,
        start=start,
        key_width=key_width,
        content_types=getattr(fetcher, "content_types", None),
        max_body_bytes=getattr(fetcher, "max_body_bytes", None),
    )


async def _resume(
    writer: TarShardWriter,
    worker: _Worker,
    inputs: Any,
    url_field: str,
    start: int,
    allow_appended_input: bool,
) -> tuple[InputTrail, Iterator[InputRecord], _Reading]:
    """The committed inputs checked and hashed: the trail, the records from the resume
    point on, and whether the input already ended there (aborts ``writer`` on failure)."""
    records = _records(inputs, url_field, start)
    try:
        trail, following = await anyio.to_thread.run_sync(
            lambda: check_committed_inputs(
                records,
                writer.manifest,
                start=start,
                allow_appended_input=allow_appended_input,
                where=writer.destination.describe("manifest.json"),
            )
        )
    except BaseException:
        writer.abort()
        await worker.aclose()
        raise
    if following is None:
        return trail, records, _Reading(exhausted=True)
    return trail, itertools.chain([following], records), _Reading()


async def _progress_bar(inputs: Any, stop: int | None, resumed_from: int) -> Progress | None:
    """A bar over the inputs left, or None when their count is unknown."""
    count: int | None = None
    if isinstance(inputs, (str, os.PathLike)):
        count = await anyio.to_thread.run_sync(count_inputs, inputs)
    else:
        count = len(inputs) if isinstance(inputs, Sized) else None
    if count is None:
        return None
    end = count if stop is None else min(stop, count)
    return Progress(max(0, end - resumed_from), "inputs")


def ingest_sync(*args: Any, backend: str = "asyncio", **kwargs: Any) -> IngestSummary:
    """``ingest`` for synchronous callers: runs it on a fresh event loop (``backend``)."""

    async def run() -> IngestSummary:
        return await ingest(*args, **kwargs)

    result: IngestSummary = anyio.run(run, backend=backend)
    return result
