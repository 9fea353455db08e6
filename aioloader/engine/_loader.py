"""DataLoader: the deterministic batch stream of a dataset, sampler and collator."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypedDict, TypeVar, overload

import anyio

from .._protocols import Collator, Dataset, SyncDataset
from ..core import Decision, Knobs, Sampler, u64
from ._autotune import AutoTune
from ._bad_samples import ErrorHandler, SkippedSample
from ._build import Transform
from ._config import LoaderCounters, ResumeCursor
from ._epochs import Epochs
from ._loader_parts import loader_parts, tuner_of, worker_pool_of
from ._processes import ProcessStatistics
from ._ring import RingStatistics
from ._state import check_state, describe_stream, stream_fingerprint
from ._stream import BatchStream
from ._work import StreamWork

if TYPE_CHECKING:
    from typing_extensions import Unpack

SampleT = TypeVar("SampleT")
BatchT = TypeVar("BatchT")

OnError = Literal["raise", "skip"] | ErrorHandler
"""``"raise"``, ``"skip"`` or ``on_error(error, index) -> sample | None``."""
resume_logger = logging.getLogger("aioloader.resume")
STATE_VERSION = 3
CONFIGURATION = frozenset(
    {
        "dataset",
        "sampler",
        "collator",
        "transform",
        "seed",
        "workers",
        "requested_workers",
        "prefetch",
        "max_inflight_reads",
        "executor",
        "on_error",
        "persistent_workers",
        "autotune",
    }
)
COUNTED = (
    "batches_delivered",
    "batches_built",
    "consumer_wait_seconds",
    "read_seconds",
    "build_seconds",
    "samples_skipped",
)
"""The ``LoaderCounters`` that ``LoaderStatistics`` reports as they stand, by their names."""


class EitherFormOptions(TypedDict, total=False):
    """The keywords that both forms of ``DataLoader`` take (documented there)."""

    transform: Transform | None
    max_inflight_reads: int
    on_error: OnError


class SamplerFormOptions(EitherFormOptions, total=False):
    """The sampler form's keywords besides ``seed`` (documented on ``DataLoader``); the
    torch form names ``workers`` and ``prefetch`` otherwise and has no place for the rest."""

    workers: int | str
    executor: str
    persistent_workers: bool | None
    prefetch: int | str
    start_step: int
    autotune: AutoTune | None


@dataclass(frozen=True, slots=True)
class LoaderStatistics:
    """What the loader has done: answers "is the trainer waiting for data?".

    ``samples_skipped`` counts the samples that failed and were replaced under
    ``on_error``; ``skipped`` keeps the first ``MAX_SKIPPED_KEPT`` of them (step, slot,
    index, reason). ``executor`` is what builds the next steps (``"thread"`` or
    ``"process"``); with ``workers="auto"``, ``executor_switches`` counts its changes and
    ``processes_refused`` says why it stays on threads when processes cannot be used.
    """

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
    processes: ProcessStatistics | None = None
    knobs: Knobs | None = None
    decisions: tuple[Decision, ...] = ()
    samples_skipped: int = 0
    skipped: tuple[SkippedSample, ...] = ()
    executor: str = "thread"
    executor_switches: int = 0
    processes_refused: str | None = None

    @property
    def mean_wait_per_batch(self) -> float:
        """Mean seconds the consumer waited for each batch."""
        return (
            self.consumer_wait_seconds / self.batches_delivered if self.batches_delivered else 0.0
        )


class DataLoader(Generic[SampleT, BatchT]):
    """Batches of ``dataset`` in the order of ``sampler``, built ahead by a task group.

    The batch at global step ``g`` is ``collator([transform(sample, rng) ...], plan)`` with
    ``plan = plan_batch(sampler, seed, g)``: a pure function of ``(seed, g)``, whatever
    ``workers``, ``prefetch`` or the start step.

    The torch form, ``DataLoader(dataset, batch_size=1, shuffle=False, sampler=None,
    num_workers=0, collate_fn=None, drop_last=False, ...)`` with torch's names and defaults
    (and ``seed``, default 0), builds this sampler form from them; every ``for`` over it
    serves an epoch of its own, as torch's loader does (docs/from-torch.md has the table).

    The configuration (every argument below) is read-only after construction: build a
    new loader to change it. Only the resume cursor changes, through cursor-driven
    iteration and ``load_state_dict``.

    Args:
        dataset: ``async get_sample(index)`` (optionally ``async get_samples(indices)``),
            or a sync ``get_sample`` / ``__getitem__``, which is read in threads.
        sampler: any sampler of ``aioloader.core``.
        collator: ``collator(samples, plan) -> batch``, synchronous and pure; a collator
            of one parameter (torch's ``collate_fn(samples)``), one whose second parameter
            is an option under another name (``np.stack(arrays, axis=0)``) and a builtin
            without a readable signature are called without the plan.
        seed: the run's seed, in ``[0, 2^64)``.
        transform: optional ``transform(sample, rng) -> sample`` (rng stream 0: its
            second parameter required or named ``rng``), or ``transform(sample) ->
            sample`` for a transform without randomness (then no rng is derived for it;
            ``np.asarray`` is one).
        workers: threads for CPU work (transform and collation); 0 builds on the
            event loop's thread; ``"auto"``: tuned while the loader runs.
        executor: ``"thread"`` (default) or ``"process"``: ``workers`` processes build
            whole steps into recycled shared memory, for transforms that hold the GIL
            (transform, collator, samples and batches must pickle).
        persistent_workers: with ``executor="process"``, keep the processes from the first
            stream to ``aclose()`` (or garbage collection): later streams and epochs start
            at once. ``None`` (default) means True for processes; ``False`` starts and stops
            them with every stream.
        prefetch: ring slots: how many steps are prepared ahead of the consumer (read
            and built with workers; with ``workers=0`` read ahead and built when taken);
            ``"auto"``: tuned while the loader runs.
        max_inflight_reads: bound on concurrent ``get_sample`` calls (and sync reads) of
            each stream.
        start_step: the cursor that ``async for batch in loader`` starts from.
        autotune: bounds and pace for ``workers="auto"`` (build threads, from the most
            down to building inline where fewer are faster) and ``prefetch="auto"`` (ring
            depth from twice the threads, and reads in flight from ``max_inflight_reads``);
            default ``AutoTune()``. Threads only (docs/workers.md).
        on_error: what a sample whose read or transform raises does: ``"raise"`` (the
            default) ends the stream at its step; ``"skip"`` replaces it by an index drawn
            as a pure function of ``(seed, step, slot, attempt)``; a callable
            ``on_error(error, index) -> sample | None`` returns the sample that takes the
            slot, or None to skip (docs/bad-samples.md).
        **torch_args: the torch form's arguments (``batch_size``, ``shuffle``,
            ``collate_fn``, ``num_workers``...), instead of ``sampler`` and ``collator``.
    """

    dataset: Any  # what the user passed (read-only after construction)
    sampler: Sampler
    collator: Collator[Any, BatchT]  # as passed: a one-argument collator stays one
    transform: Transform | None
    seed: int
    workers: int
    requested_workers: int
    executor: str
    persistent_workers: bool
    prefetch: int
    max_inflight_reads: int
    autotune: AutoTune | None
    on_error: Any

    @overload
    def __init__(
        self,
        dataset: Dataset[Any] | SyncDataset[Any],
        sampler: Sampler,
        collator: Collator[SampleT, BatchT] | Callable[[Sequence[SampleT]], BatchT],
        *,
        seed: int,
        **options: Unpack[SamplerFormOptions],
    ) -> None: ...

    @overload
    def __init__(
        self: DataLoader[Any, Any],
        dataset: Any,
        *,
        batch_size: int | None = 1,
        shuffle: bool | None = False,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[..., Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Any = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        seed: int | None = None,
        **options: Unpack[EitherFormOptions],
    ) -> None: ...

    def __init__(
        self,
        dataset: Dataset[Any] | SyncDataset[Any],
        sampler: Sampler | Any = None,
        collator: Collator[SampleT, BatchT] | Callable[[Sequence[SampleT]], BatchT] | Any = None,
        *,
        seed: int | None = None,
        transform: Transform | None = None,
        workers: int | str = 0,
        executor: str = "thread",
        persistent_workers: bool | None = None,
        prefetch: int | str = 8,
        max_inflight_reads: int = 64,
        start_step: int = 0,
        autotune: AutoTune | None = None,
        on_error: OnError = "raise",
        **torch_args: Any,
    ) -> None:
        parts = loader_parts(
            dataset,
            sampler,
            collator,
            torch_args,
            seed=seed,
            transform=transform,
            workers=workers,
            executor=executor,
            persistent_workers=persistent_workers,
            prefetch=prefetch,
            max_inflight_reads=max_inflight_reads,
            start_step=start_step,
            autotune=autotune,
            on_error=on_error,
        )
        config = parts.config
        for name in CONFIGURATION - {"autotune", "collator", "on_error"}:
            object.__setattr__(self, name, getattr(config, name))
        object.__setattr__(self, "collator", parts.form.collator)
        object.__setattr__(self, "on_error", on_error)
        self._config = config
        self._cursor = ResumeCursor(parts.start_step)
        self._counters = LoaderCounters()
        self._works = self._counters.running  # the works of the streams still running
        self._latest: StreamWork[BatchT] | None = None
        self._tuner = tuner_of(parts, self._counters)
        tuned = parts.tuning.settings if self._tuner is not None else None
        object.__setattr__(self, "autotune", tuned)
        self._sync_epoch_end: int | None = None  # the epoch end of the last ``for`` loop
        self._epochs = Epochs(new_per_loop=parts.form.torch, follows=parts.form.epochs)
        self._first_batch = parts.first_batch  # checks the global generators around it
        self._worker_pool = worker_pool_of(parts, self._tuner)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in CONFIGURATION:
            raise AttributeError(
                f"DataLoader.{name} is read-only after construction (tried to set "
                f"{type(value).__name__}); build a new DataLoader to change it"
            )
        object.__setattr__(self, name, value)

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
        return self._cursor.step

    def stream(self, start: int | None = None, stop: int | None = None) -> BatchStream[BatchT]:
        """Batches of global steps ``[start, stop)`` in step order (``stop=None``: no end).

        ``start`` defaults to the loader's cursor. Prefer the structured form, which scopes
        the stream's work to the block: ``async with loader.stream() as batches: async for
        batch in batches: ...``; a bare ``async for`` hosts it in a system task
        (docs/iterating.md).

        ``start=None`` makes a cursor-driven stream: each batch it delivers advances the
        loader's resume cursor (``state_dict()``). An explicit ``start`` (to peek, or to
        evaluate a range) leaves the cursor alone.
        """
        first = self._cursor.step if start is None else u64("start", start)
        last = None if stop is None else u64("stop", stop)
        if last is not None and last < first:
            raise ValueError(f"stop must be >= start ({first}) but got {last}")
        return self._open(first, last, moves_cursor=start is None)

    def _open(self, start: int, stop: int | None, *, moves_cursor: bool) -> BatchStream[BatchT]:
        if self._first_batch is not None:
            self._first_batch.arm()
        # the loader's first stream (a start, or a resume) builds its first batch alone;
        # later ones (the next epoch's loop, say) start every step at once
        work: StreamWork[BatchT] = StreamWork(
            self._config,
            self._counters,
            start,
            stop,
            self._worker_pool,
            self._tuner,
            first_alone=self._latest is None,
        )
        self._latest = work
        return BatchStream(work, self._cursor if moves_cursor else None)

    def epoch(self) -> BatchStream[BatchT]:
        """The rest of the cursor's epoch: steps ``[cursor, (cursor // S + 1) * S)``.

        Cursor-driven: each delivered batch advances the resume cursor.
        """
        steps = self.steps_per_epoch
        end = (self._cursor.step // steps + 1) * steps
        return self._open(self._cursor.step, end, moves_cursor=True)

    def __aiter__(self) -> BatchStream[BatchT]:
        stop = self._epochs.begin_loop(self._cursor, self.steps_per_epoch)
        if stop is not None:  # the torch form: a loop's epoch of its own
            return self._open(self._cursor.step, stop, moves_cursor=True)
        return self.epoch()

    def set_epoch(self, epoch: int) -> None:
        """The next ``for`` (or ``async for``) over the loader serves epoch ``epoch``.

        As torch's ``DistributedSampler.set_epoch``: call it before each epoch's loop. The
        loop starts at the epoch's first step, or goes on from the cursor when
        ``load_state_dict`` put it inside that epoch (an exact resume).
        """
        self._epochs.set_epoch(epoch)

    def __iter__(self) -> Iterator[BatchT]:
        """The rest of the cursor's epoch, for synchronous code (a portal thread).

        The epoch is the cursor's when the first batch is asked for, so a
        ``load_state_dict`` between ``iter(loader)`` and the first ``next`` is served.
        When the previous ``for batch in loader`` left this same epoch early (``break``),
        this loop serves the rest of that epoch, where torch's ``DataLoader`` would start a
        new one: a one-line warning on the ``aioloader.resume`` logger says so (silence it
        with ``logging.getLogger("aioloader.resume").setLevel(logging.ERROR)``).
        """
        from ._blocking import iterate_blocking

        return iterate_blocking(self, None, self._sync_epoch_stop)

    def _sync_epoch_stop(self) -> int:
        """The end of the cursor's epoch, for a ``for`` loop about to take its first batch."""
        stop = self._epochs.begin_loop(self._cursor, self.steps_per_epoch)
        if stop is not None:  # the torch form: a loop's epoch of its own
            return stop
        steps = self.steps_per_epoch
        step = self._cursor.step
        end = (step // steps + 1) * steps
        if self._sync_epoch_end == end and step % steps:
            resume_logger.warning(
                "aioloader: this for loop resumes epoch %d at global step %d (%d of %d steps "
                "left) because the previous loop left it early; torch would start a new "
                "epoch (silence: logging.getLogger('aioloader.resume').setLevel(logging.ERROR))",
                step // steps,
                step,
                end - step,
                steps,
            )
        self._sync_epoch_end = end
        return end

    def iter_sync(
        self,
        start: int | None = None,
        stop: int | None = None,
        *,
        backend: str = "asyncio",
        backend_options: Mapping[str, Any] | None = None,
    ) -> Iterator[BatchT]:
        """``stream(start, stop)`` for synchronous code, through a portal thread.

        Like ``stream()``, it moves the resume cursor only when ``start`` is None.
        ``backend`` is ``"asyncio"`` (with uvloop where installed, unless
        ``backend_options`` say otherwise) or ``"trio"``.
        """
        from ._blocking import check_backend, iterate_blocking

        return iterate_blocking(self, start, stop, check_backend(backend), backend_options)

    async def aclose_streams(self) -> None:
        """Cancel every stream of this loader still running and wait until its work ends.

        Streams left by ``break`` are cancelled as soon as their handle is dropped; this
        waits for their threads and reads to finish. The loader stays usable.
        """
        for work in list(self._counters.running):
            work.cancel()
            await work.wait_ended()

    async def aclose(self) -> None:
        """``aclose_streams()``, then stop the persistent worker processes (in a thread).

        The loader stays usable: a later stream starts new processes.
        """
        await self.aclose_streams()
        await anyio.to_thread.run_sync(self._worker_pool.close)

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The whole resumable state: version, seed, next step and the stream's fingerprint.

        ``fingerprint`` identifies what decides the stream (the sampler's kind and
        ``fingerprint_fields()``, the dataset's length, the seed); ``stream`` says the same
        in words. A sampler without ``fingerprint_fields()`` is refused with a ``TypeError``.
        """
        length = self._config.dataset_length
        return {
            "version": STATE_VERSION,
            "seed": self.seed,
            "next_step": self._cursor.step,
            "fingerprint": stream_fingerprint(self.sampler, length, self.seed),
            "stream": describe_stream(self.sampler, length),
        }

    def load_state_dict(self, state: Mapping[str, Any], *, check_stream: bool = True) -> None:
        """Resume from ``state_dict()``: the next batches equal an uninterrupted run's.

        The state must come from a loader with the same seed; with ``check_stream`` (the
        default) also with the same sampler kind and arguments and dataset length.
        ``check_stream=False`` accepts a deliberate change (say, a longer dataset) and
        resumes at ``next_step`` of the new stream. Global-batch sharding (``RankSlice``)
        is fingerprinted by its global sampler, so a change of world size is accepted.
        """
        self._cursor.step = check_state(
            state,
            STATE_VERSION,
            self.seed,
            self.sampler,
            self._config.dataset_length,
            check_stream=check_stream,
        )
        self._sync_epoch_end = None  # a resume mid-epoch is what the caller asked for
        self._epochs.resumed()

    def statistics(self) -> LoaderStatistics:
        """Counters of the loader, with the ring of the latest stream."""
        stats = self._counters
        running = stats.running
        latest = self._latest
        tuner = self._tuner
        executor = self.executor if tuner is None else tuner.knobs.executor
        switches = sum(d.knob == "processes" for d in tuner.decisions) if tuner else 0
        ring = latest.ring.statistics() if latest is not None else None
        in_flight = sum(work.bound.in_flight for work in running)
        peak = max((work.bound.peak for work in (*running, latest) if work), default=0)
        total = stats.reads_total + sum(work.bound.total for work in running)
        return LoaderStatistics(
            **{name: getattr(stats, name) for name in COUNTED},
            reads_in_flight=in_flight,
            peak_reads_in_flight=peak,
            reads_total=total,
            next_step=self._cursor.step,
            ring=ring,
            processes=self._worker_pool.statistics(),
            knobs=self._tuner.knobs if self._tuner is not None else None,
            decisions=tuple(self._tuner.decisions) if self._tuner is not None else (),
            skipped=tuple(stats.skipped),
            executor=executor,
            executor_switches=switches,
            processes_refused=tuner.processes_refused if tuner is not None else None,
        )

    def __repr__(self) -> str:
        return (
            f"DataLoader(dataset={type(self.dataset).__name__}, sampler={self.sampler!r}, "
            f"seed={self.seed}, workers={self.workers}, prefetch={self.prefetch})"
        )
