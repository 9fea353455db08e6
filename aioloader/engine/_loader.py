"""DataLoader: the deterministic batch stream of a dataset, sampler and collator."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..core._check import as_int, u64
from ..core._plan import BatchPlan
from ..core._samplers import Sampler
from ._build import Transform
from ._reads import ReadCounter, make_batch_reader
from ._ring import RingStatistics
from ._stream import BatchStream

SampleT = TypeVar("SampleT")
BatchT = TypeVar("BatchT")

THREADLESS_PLATFORMS = ("emscripten", "wasi")
STATE_VERSION = 1
EXECUTORS = ("thread", "process")


@dataclass(frozen=True, slots=True)
class LoaderStatistics:
    """What the loader has done: answers "is the trainer waiting for data?"."""

    batches_delivered: int
    batches_built: int
    consumer_wait_seconds: float
    read_seconds: float
    build_seconds: float
    reads_in_flight: int
    peak_reads_in_flight: int
    reads_total: int
    next_step: int
    ring: RingStatistics | None

    @property
    def mean_wait_per_batch(self) -> float:
        """Mean seconds the consumer waited for each batch."""
        return (
            self.consumer_wait_seconds / self.batches_delivered if self.batches_delivered else 0.0
        )


class _Counters:
    __slots__ = (
        "batches_built",
        "batches_delivered",
        "build_seconds",
        "consumer_wait_seconds",
        "read_seconds",
    )

    def __init__(self) -> None:
        self.batches_delivered = 0
        self.batches_built = 0
        self.consumer_wait_seconds = 0.0
        self.read_seconds = 0.0
        self.build_seconds = 0.0


def _positive(name: str, value: Any) -> int:
    number = as_int(name, value)
    if number < 1:
        raise ValueError(f"{name} must be an integer >= 1 but got {number}")
    return number


class DataLoader(Generic[SampleT, BatchT]):
    """Batches of ``dataset`` in the order of ``sampler``, built ahead by a task group.

    The batch at global step ``g`` is ``collator([transform(sample, rng) ...], plan)`` with
    ``plan = plan_batch(sampler, seed, g)``: a pure function of ``(seed, g)``, whatever
    ``workers``, ``prefetch`` or the start step.

    Args:
        dataset: ``async get_sample(index)`` (optionally ``async get_samples(indices)``),
            or a sync ``get_sample`` / ``__getitem__``, which is read in threads.
        sampler: any sampler of ``aioloader.core``.
        collator: ``collator(samples, plan) -> batch``, synchronous and pure.
        seed: the run's seed, in ``[0, 2^64)``.
        transform: optional ``transform(sample, rng) -> sample`` (rng stream 0).
        workers: threads for CPU work (transform and collation); 0 builds on the
            event loop's thread.
        executor: ``"thread"`` (default) or ``"process"``: ``workers`` processes build
            whole steps into recycled shared memory, for transforms that hold the GIL
            (transform, collator, samples and batches must pickle).
        prefetch: ring slots: how many steps are prepared ahead of the consumer (read
            and built with workers; with ``workers=0`` read ahead and built when taken).
        max_inflight_reads: bound on concurrent ``get_sample`` calls (and sync reads).
        start_step: the cursor that ``async for batch in loader`` starts from.
    """

    def __init__(
        self,
        dataset: Any,
        sampler: Sampler,
        collator: Callable[[Sequence[SampleT], BatchPlan], BatchT],
        *,
        seed: int,
        transform: Transform | None = None,
        workers: int = 0,
        executor: str = "thread",
        prefetch: int = 8,
        max_inflight_reads: int = 64,
        start_step: int = 0,
    ) -> None:
        if not callable(getattr(sampler, "indices", None)) or not hasattr(
            sampler, "steps_per_epoch"
        ):
            raise TypeError(
                "sampler must have steps_per_epoch and indices(seed, epoch, step) "
                f"but got {type(sampler).__name__}"
            )
        if sampler.steps_per_epoch < 1:
            raise ValueError(
                f"sampler has steps_per_epoch = {sampler.steps_per_epoch}: "
                "fewer items than one batch"
            )
        if not callable(collator):
            raise TypeError(f"collator must be callable but got {type(collator).__name__}")
        if transform is not None and not callable(transform):
            raise TypeError(
                f"transform must be callable or None but got {type(transform).__name__}"
            )
        self.dataset = dataset
        self.sampler = sampler
        self.collator = collator
        self.transform = transform
        self.seed = u64("seed", seed)
        requested_workers = as_int("workers", workers)
        if requested_workers < 0:
            raise ValueError(f"workers must be an integer >= 0 but got {requested_workers}")
        self.requested_workers = requested_workers
        self.workers = 0 if sys.platform in THREADLESS_PLATFORMS else requested_workers
        # -- executor="process" (issue 14) --
        if executor not in EXECUTORS:
            raise ValueError(f"executor must be 'thread' or 'process' but got {executor!r}")
        if executor == "process" and self.workers < 1:
            raise ValueError(
                f"executor='process' requires workers >= 1 but got workers={requested_workers}"
            )
        self.executor = executor
        self.prefetch = _positive("prefetch", prefetch)
        self.max_inflight_reads = _positive("max_inflight_reads", max_inflight_reads)
        self._cursor = u64("start_step", start_step)
        self._reads = ReadCounter()
        self._read = make_batch_reader(dataset, self.max_inflight_reads, self._reads)
        self._stats = _Counters()
        self._last_stream: BatchStream[BatchT] | None = None

    # -- the stream -----------------------------------------------------------------------
    @property
    def steps_per_epoch(self) -> int:
        """Steps per epoch of the sampler."""
        return int(self.sampler.steps_per_epoch)

    def __len__(self) -> int:
        return self.steps_per_epoch

    @property
    def next_step(self) -> int:
        """The global step the next epoch-iteration (or ``stream()``) starts from."""
        return self._cursor

    def stream(self, start: int | None = None, stop: int | None = None) -> BatchStream[BatchT]:
        """Batches of global steps ``[start, stop)`` in step order (``stop=None``: no end).

        ``start`` defaults to the loader's cursor. Use as ``async for`` or, to scope its
        tasks to a block, ``async with loader.stream() as batches: async for ...``.
        """
        first = self._cursor if start is None else u64("start", start)
        last = None if stop is None else u64("stop", stop)
        if last is not None and last < first:
            raise ValueError(f"stop must be >= start ({first}) but got {last}")
        stream: BatchStream[BatchT] = BatchStream(self, first, last)
        self._last_stream = stream
        return stream

    def epoch(self) -> BatchStream[BatchT]:
        """The rest of the cursor's epoch: steps ``[cursor, (cursor // S + 1) * S)``."""
        steps = self.steps_per_epoch
        end = (self._cursor // steps + 1) * steps
        return self.stream(self._cursor, end)

    def __aiter__(self) -> BatchStream[BatchT]:
        return self.epoch()

    def __iter__(self) -> Iterator[BatchT]:
        from ._blocking import iterate_blocking

        steps = self.steps_per_epoch
        return iterate_blocking(self, self._cursor, (self._cursor // steps + 1) * steps)

    def iter_sync(
        self,
        start: int | None = None,
        stop: int | None = None,
        *,
        backend: str = "asyncio",
        backend_options: Mapping[str, Any] | None = None,
    ) -> Iterator[BatchT]:
        """``stream(start, stop)`` for synchronous code, through a portal thread."""
        from ._blocking import iterate_blocking

        first = self._cursor if start is None else u64("start", start)
        return iterate_blocking(self, first, stop, backend, backend_options)

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, int]:
        """The whole resumable state: the seed and the next step."""
        return {"version": STATE_VERSION, "seed": self.seed, "next_step": self._cursor}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state_dict()``: the next batches equal an uninterrupted run's."""
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a mapping but got {type(state).__name__}")
        missing = {"seed", "next_step"} - set(state)
        if missing:
            raise ValueError(f"state must have keys seed and next_step but lacks {sorted(missing)}")
        seed = u64("state['seed']", state["seed"])
        if seed != self.seed:
            raise ValueError(
                f"state['seed'] must equal the loader's seed {self.seed} but got {seed}"
            )
        self._cursor = u64("state['next_step']", state["next_step"])

    def statistics(self) -> LoaderStatistics:
        """Counters of the loader, with the ring of the latest stream."""
        stats = self._stats
        ring = self._last_stream.ring.statistics() if self._last_stream is not None else None
        return LoaderStatistics(
            batches_delivered=stats.batches_delivered,
            batches_built=stats.batches_built,
            consumer_wait_seconds=stats.consumer_wait_seconds,
            read_seconds=stats.read_seconds,
            build_seconds=stats.build_seconds,
            reads_in_flight=self._reads.in_flight,
            peak_reads_in_flight=self._reads.peak,
            reads_total=self._reads.total,
            next_step=self._cursor,
            ring=ring,
        )

    def __repr__(self) -> str:
        return (
            f"DataLoader(dataset={type(self.dataset).__name__}, sampler={self.sampler!r}, "
            f"seed={self.seed}, workers={self.workers}, prefetch={self.prefetch})"
        )
