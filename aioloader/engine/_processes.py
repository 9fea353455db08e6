"""Worker processes for transforms that hold the GIL: ``executor="process"``.

Each worker receives the transform and the collator once, then builds whole steps with
``build_batch`` (the function the threads run, so batches are bit for bit the same) and
writes every array of the batch into recycled shared memory (``_shm_pool``). The parent
keeps the reads (they are async, in its event loop), sends ``(plan, samples)`` and gets back
the batch as numpy views onto the segment; ``batch.release()`` gives the segment back.

Threads in the parent: one sender per worker (a full pipe never blocks the event loop)
and one collector that waits on every reply socket and every process sentinel at once, so
a reply and a death are both seen without polling; it wakes the awaiting task through the
loop's thread-safe call (asyncio, uvloop, trio). ``WorkerHandle`` (``_worker_handle``) is
the parent's side of one worker: its process, pipes, outbox, pending jobs and freed segments.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.reduction import recv_handle
from typing import Any

import anyio

from .._compat import add_note
from .._errors import LoaderClosedError, WorkerDiedError
from .._event_loops import threadsafe_caller
from ..core import BatchPlan, at_least, release_batch
from ._build import Transform
from ._shm_pool import IS_POSIX, SegmentLease, SegmentReturns, load_batch
from ._worker_handle import Job, WorkerHandle, describe_exit, start_worker

logger = logging.getLogger("aioloader")
MP_CONTEXTS = ("spawn", "forkserver")
_JOIN_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class ProcessStatistics:
    """A snapshot of a ``ProcessBuilders``.

    Attributes:
        workers: Worker processes started.
        workers_alive: Those that have not exited.
        worker_pids: Their process ids, in worker order (0 while one is starting).
        batches_built: Batches received from the workers.
        startup_seconds: From construction to the first batch received (``None`` before).
        ready_seconds: From construction to every worker having loaded the transform and
            collator (``None`` before).
        segments: Shared-memory segments the workers created (each is reused).
        segments_in_use: Segments held by batches the parent has not let go of.
        bytes_in_pool: Bytes of the parent's current mappings of those segments.
        jobs_pending: Steps sent and not yet answered.
    """

    workers: int
    workers_alive: int
    worker_pids: tuple[int, ...]
    batches_built: int
    startup_seconds: float | None
    ready_seconds: float | None
    segments: int
    segments_in_use: int
    bytes_in_pool: int
    jobs_pending: int


def _setup_payload(
    transform: Transform | None,
    collator: Callable[[Sequence[Any], BatchPlan], Any],
    reader: Callable[[int], Any] | None,
) -> tuple[bytes, Callable[[int], Any] | None]:
    """What every worker receives first: ``(transform, collator, reader)`` pickled, and the
    reader, or None where the dataset does not pickle (it is then read in the parent)."""
    if reader is not None:  # a sync dataset: read in the workers, only plans go there
        try:
            return pickle.dumps((transform, collator, reader), protocol=5), reader
        except Exception as error:  # read in the parent, as for async datasets
            logger.info("aioloader: the dataset does not pickle (%r): read in the parent", error)
    try:
        return pickle.dumps((transform, collator, None), protocol=5), None
    except Exception as error:
        raise TypeError(
            "transform and collator must pickle to reach worker processes (define them "
            f"at module level, not as lambdas or local functions) but got: {error}"
        ) from error


class ProcessBuilders:
    """Worker processes that build whole steps into recycled shared memory.

    Args:
        workers: How many processes (>= 1).
        transform: ``transform(sample, rng)`` or ``None``; pickled once per worker.
        collator: ``collator(samples, plan)``; pickled once per worker.
        mp_context: ``"spawn"`` (default: a fresh interpreter that inherits no threads or
            locks from the parent, the same on Linux and macOS) or ``"forkserver"``. Both
            start the standard library's resource tracker, one process per interpreter that
            stays while the parent lives and exits with it; it holds none of the segments.
        reader: a sync dataset's ``get_sample`` (or ``__getitem__``): when it pickles, the
            workers read the samples themselves and ``build`` sends only the plan, as
            torch's workers do (``reads_in_workers``); an async dataset is read in the parent.

    The transform, the collator, the samples and the batches must pickle (define them at
    module level, not as lambdas). A script that starts workers needs the usual
    ``if __name__ == "__main__":`` guard.
    """

    def __init__(
        self,
        workers: int,
        transform: Transform | None,
        collator: Callable[[Sequence[Any], BatchPlan], Any],
        *,
        mp_context: str = "spawn",
        reader: Callable[[int], Any] | None = None,
    ) -> None:
        workers = at_least("workers", workers, 1)
        if mp_context not in MP_CONTEXTS:
            raise ValueError(f"mp_context must be 'spawn' or 'forkserver' but got {mp_context!r}")
        if not IS_POSIX:  # pragma: no cover - Windows
            raise RuntimeError(
                f"executor='process' needs a POSIX system (Linux, macOS) but runs on {os.name}"
            )
        setup, reader = _setup_payload(transform, collator, reader)
        self.reads_in_workers = reader is not None
        self._created = time.perf_counter()
        self._lock = threading.RLock()
        self._returns = SegmentReturns()
        self._closed = False
        self._next_job = 0
        self._built = 0
        self._in_use = 0
        self._startup: float | None = None
        self._ready: float | None = None
        self._wake_read, self._wake_write = os.pipe()
        context = multiprocessing.get_context(mp_context)
        self._workers: list[WorkerHandle] = []
        try:
            for index in range(workers):
                worker = start_worker(context, index)
                worker.sender = threading.Thread(
                    target=self._send,
                    args=(worker, setup),
                    name=f"aioloader-send-{index}",
                    daemon=True,
                )
                worker.sender.start()
                self._workers.append(worker)
        except BaseException:
            self.close()
            raise
        self._collector = threading.Thread(
            target=self._collect, name="aioloader-collect", daemon=True
        )
        self._collector.start()

    @property
    def healthy(self) -> bool:
        """Whether every worker is alive and the builders are open (fit for another stream)."""
        with self._lock:
            return not self._closed and all(w.alive for w in self._workers)

    # -- the caller's side ------------------------------------------------------------
    async def build(self, plan: BatchPlan, samples: list[Any] | None) -> Any:
        """Transform and collate ``samples`` in a worker process; returns the batch.

        ``samples=None`` (only when ``reads_in_workers``): the worker reads them.

        The calling task waits without blocking the event loop. Cancelled, it returns at
        once; the batch, when it comes, is released.
        """
        buffers: list[pickle.PickleBuffer] = []
        try:
            # Arrays leave the pickle as buffers, written to the pipe without a copy.
            payload = pickle.dumps((plan, samples), protocol=5, buffer_callback=buffers.append)
            raws = [buffer.raw() for buffer in buffers]
        except Exception as error:
            add_note(
                error,
                f"aioloader: the samples of global step {plan.global_step} must pickle to "
                "reach a worker process",
            )
            raise
        done = anyio.Event()
        call_soon = threadsafe_caller()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                call_soon(done.set)

        job = self._queue(plan.global_step, wake, None, payload, raws)
        try:
            await done.wait()
        except anyio.get_cancelled_exc_class():
            self.abandon(job)
            raise
        result, failure = job.hand_over()
        if failure is not None:
            raise failure
        return result

    def submit(
        self,
        step: int,
        planner: Callable[[int], BatchPlan],
        done: Callable[[Any, BaseException | None], None],
    ) -> Job:
        """Build global ``step`` without the event loop (only when ``reads_in_workers``).

        A worker's sender thread plans the step with ``planner(step)`` and sends the plan;
        the worker reads and builds it. ``done(batch, error)`` runs in the collector thread
        (in the sender's for a planning error), never after ``abandon(job)`` has returned
        unless the job was already done. Raises LoaderClosedError after ``close`` and
        WorkerDiedError when every worker has died.
        """
        if not self.reads_in_workers:
            raise RuntimeError("submit needs reads_in_workers (a dataset the workers read)")

        def wake() -> None:
            done(*job.hand_over())

        job = self._queue(step, wake, planner, b"", [])
        return job

    def _queue(
        self,
        step: int,
        wake: Callable[[], None],
        planner: Callable[[int], BatchPlan] | None,
        payload: bytes,
        raws: list[memoryview],
    ) -> Job:
        with self._lock:
            if self._closed:
                raise LoaderClosedError("these worker processes were closed")
            worker = self._pick_worker()
            job = Job(self._next_job, step, wake, planner)
            self._next_job += 1
            worker.pending.append(job)
        worker.outbox.put((job, payload, raws))
        return job

    def abandon(self, job: Job) -> None:
        """Nobody waits for ``job`` any more: its batch, now or when it comes, is released."""
        with self._lock:
            job.abandoned = True
            result, job.result = job.result, None
        release_batch(result)

    def _pick_worker(self) -> WorkerHandle:
        alive = [w for w in self._workers if w.alive]
        if not alive:
            first = self._workers[0]
            raise WorkerDiedError(
                f"aioloader: every build worker has died (worker 0: pid "
                f"{first.pid or first.process.pid}, "
                f"{describe_exit(first.process.exitcode)})",
                0,
                first.process.exitcode,
            )
        return min(alive, key=lambda w: len(w.pending))

    # -- sender threads ---------------------------------------------------------------
    def _send(self, worker: WorkerHandle, setup: bytes) -> None:
        try:
            worker.jobs.send_bytes(setup)
            while True:
                item = worker.outbox.get()
                if item is None:
                    return
                job, payload, raws = item
                if job.planner is not None and not job.abandoned:
                    try:
                        payload = self._plan_payload(job.planner, job.step)
                    except Exception as error:  # the step's error: no reply will come
                        with self._lock, contextlib.suppress(ValueError):
                            worker.pending.remove(job)
                        self._complete(job, None, error)
                        continue
                with self._lock:
                    if job.abandoned:
                        # Cancelled before it left: never sent, so no reply to wait for.
                        with contextlib.suppress(ValueError):
                            worker.pending.remove(job)
                        continue
                    freed, worker.freed = worker.freed, []
                sizes = [raw.nbytes for raw in raws]
                worker.jobs.send_bytes(pickle.dumps((job.id, freed, sizes), protocol=5))
                worker.jobs.send_bytes(payload)
                for raw in raws:
                    worker.jobs.send_bytes(raw)
                del item, job, payload, raws  # the job will hold its batch: keep no reference
        except OSError:
            return  # the worker is gone; the collector reports it
        except Exception as error:  # pragma: no cover - a bug: the pipe may be out of step
            worker.fatal = f"aioloader: its sender thread failed: {error!r}"
            worker.process.terminate()  # the collector sees the death and fails its steps
        finally:
            worker.jobs.close()

    @staticmethod
    def _plan_payload(planner: Callable[[int], BatchPlan], step: int) -> bytes:
        try:
            plan = planner(step)
        except Exception as error:
            add_note(error, f"aioloader: while planning global step {step}")
            raise
        return pickle.dumps((plan, None), protocol=5)

    # -- the collector thread ---------------------------------------------------------
    def _collect(self) -> None:
        try:
            self._collect_until_woken()
        except Exception as error:  # pragma: no cover - a bug: fail every step, never hang
            for worker in self._workers:
                with self._lock:
                    jobs, worker.alive = list(worker.pending), False
                    worker.pending.clear()
                with contextlib.suppress(Exception):
                    worker.process.terminate()
                for job in jobs:
                    failure = RuntimeError(f"aioloader: the collector thread failed: {error!r}")
                    self._complete(job, None, failure)

    def _collect_until_woken(self) -> None:
        wake = self._wake_read
        while True:
            waiting: dict[Any, WorkerHandle] = {}
            for worker in self._workers:
                if worker.alive:
                    waiting[worker.replies] = worker
                    waiting[worker.process.sentinel] = worker
            ready = multiprocessing.connection.wait([wake, *waiting])
            if wake in ready:
                return
            for handle in ready:
                worker = waiting[handle]
                if not worker.alive:
                    continue
                if handle is worker.replies:
                    if not self._receive(worker):
                        self._bury(worker)
                else:
                    # Read what it said before it died, then report the death.
                    with contextlib.suppress(OSError, EOFError):
                        while worker.replies.poll() and self._receive(worker):
                            pass
                    self._bury(worker)

    def _receive(self, worker: WorkerHandle) -> bool:
        """Handle one message of ``worker``; ``False`` at end of file."""
        try:
            message = pickle.loads(worker.replies.recv_bytes())
        except (EOFError, OSError):
            return False
        kind = message[0]
        if kind == "ready":
            worker.pid, worker.ready = message[1], True
            if all(w.ready for w in self._workers) and self._ready is None:
                self._ready = time.perf_counter() - self._created
            return True
        if kind == "fatal":
            worker.fatal = message[1]
            return True
        job_id = message[1]
        with self._lock:
            job = worker.pending.popleft()
        if job.id != job_id:  # pragma: no cover - a bug
            raise RuntimeError(f"worker {worker.index} answered job {job_id}, not {job.id}")
        if kind == "error":
            self._complete(job, None, message[2])
            return True
        stored = message[2]
        if stored.new_fd is not None:
            try:
                worker.segments.attach(stored.segment, recv_handle(worker.replies))
            except (EOFError, OSError):
                return False
        if job.abandoned:
            with self._lock:
                worker.freed.append(stored.segment)
            return True
        try:
            mapping = worker.segments.view(stored.segment, stored.size)
            batch, _ = load_batch(stored, mapping, self._returns, worker.index, self._give_back)
        except Exception as unpack_error:
            add_note(unpack_error, f"aioloader: while unpacking the batch of step {job.step}")
            with self._lock:
                worker.freed.append(stored.segment)
            self._complete(job, None, unpack_error)
            return True
        with self._lock:
            self._in_use += 1
            self._built += 1
            if self._startup is None:
                self._startup = time.perf_counter() - self._created
        self._complete(job, batch, None)
        return True

    def _complete(self, job: Job, batch: Any, error: BaseException | None) -> None:
        with self._lock:
            abandoned = job.abandoned
            if not abandoned:
                job.result, job.error, job.done = batch, error, True
        if abandoned:
            release_batch(batch)
        else:
            job.wake()

    def _give_back(self, lease: SegmentLease) -> None:
        with self._lock:
            self._workers[lease.worker].freed.append(lease.segment)
            self._in_use -= 1

    def _bury(self, worker: WorkerHandle) -> None:
        """``worker`` has exited: fail every step it still owed."""
        worker.process.join()
        exitcode = worker.process.exitcode
        with self._lock:
            worker.alive = False
            jobs = list(worker.pending)
            worker.pending.clear()
            closed = self._closed
        if closed:
            return
        worker.outbox.put(None)
        what = describe_exit(exitcode)
        why = f"; its setup failed:\n{worker.fatal}" if worker.fatal else ""
        for k, job in enumerate(jobs):
            where = "while building" if k == 0 else "before building"
            error = WorkerDiedError(
                f"aioloader: build worker {worker.index} (pid {worker.pid or worker.process.pid}) "
                f"died with {what} {where} global step {job.step}{why}",
                worker.index,
                exitcode,
            )
            self._complete(job, None, error)

    # -- closing ----------------------------------------------------------------------
    def close(self) -> None:
        """Stop and join every process and thread; idempotent.

        Work in flight is abandoned (its workers are terminated, not waited for). Batches
        already delivered stay readable until released.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            busy = [w for w in self._workers if w.pending or not w.ready]
        for worker in self._workers:
            worker.outbox.put(None)  # the sender closes the pipe: an idle worker exits
        for worker in busy:
            if worker.process.is_alive():
                worker.process.terminate()
        for worker in self._workers:
            if worker.sender is not None:
                worker.sender.join()
        collector = getattr(self, "_collector", None)
        os.write(self._wake_write, b"x")
        if collector is not None:
            collector.join()
        for worker in self._workers:
            worker.process.join(_JOIN_SECONDS)
            if worker.process.exitcode is None:  # pragma: no cover - a stuck interpreter
                worker.process.kill()
                worker.process.join()
            worker.process.close()
            worker.replies.close()
            worker.segments.close()
        os.close(self._wake_read)
        os.close(self._wake_write)
        for worker in self._workers:
            for job in worker.pending:
                self._complete(job, None, LoaderClosedError("the worker processes were closed"))
            worker.pending.clear()

    def statistics(self) -> ProcessStatistics:
        """Counters and holdings at this moment."""
        with self._lock:
            workers = self._workers
            return ProcessStatistics(
                workers=len(workers),
                workers_alive=sum(w.alive and not self._closed for w in workers),
                worker_pids=tuple(w.pid for w in workers),
                batches_built=self._built,
                startup_seconds=self._startup,
                ready_seconds=self._ready,
                segments=sum(w.segments.created for w in workers),
                segments_in_use=self._in_use,
                bytes_in_pool=sum(w.segments.bytes_mapped for w in workers),
                jobs_pending=sum(len(w.pending) for w in workers),
            )

    def __repr__(self) -> str:
        s = self.statistics()
        return (
            f"ProcessBuilders(workers={s.workers}, batches_built={s.batches_built}, "
            f"segments={s.segments})"
        )


__all__ = ["ProcessBuilders", "ProcessStatistics"]
