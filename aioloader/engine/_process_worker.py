"""The loop of one build worker process (the child side of ``ProcessBuilders``).

Messages, each one pickle (protocol 5) per ``send_bytes``:

- parent to worker, on ``jobs``: first ``(transform, collator, reader)``, then per step
  ``(job_id, freed_segments, buffer_sizes)``, the pickle of ``(plan, samples)`` and its
  out-of-band buffers (the samples' arrays), one message each; end of file means stop.
  ``samples`` is None when the worker reads them itself with ``reader`` (a sync dataset).
- worker to parent, on ``replies`` (a Unix socket): ``("ready", pid)`` once, then per job
  ``("batch", job_id, StoredBatch)`` (followed by the descriptor of a new segment, if
  any) or ``("error", job_id, exception)``; ``("fatal", text)`` if the setup failed.
"""

from __future__ import annotations

import os
import pickle
import signal
import traceback
from multiprocessing.connection import Connection
from multiprocessing.reduction import send_handle

from .._compat import add_note
from ..core import release_batch
from ._build import build_batch
from ._reads import read_chunk
from ._shm_pool import WorkerArena


def _error_reply(job_id: int, error: BaseException, worker: int) -> bytes:
    """The pickled exception, or a stand-in with its type and message if it won't pickle."""
    add_note(
        error,
        f"aioloader: raised in build worker {worker} (pid {os.getpid()}); its traceback:\n"
        + "".join(traceback.format_tb(error.__traceback__)).rstrip(),
    )
    try:
        return pickle.dumps(("error", job_id, error), protocol=5)
    except Exception as pickling_error:
        stand_in = RuntimeError(f"{type(error).__qualname__}: {error}")
        for note in getattr(error, "__notes__", ()):
            add_note(stand_in, note)
        add_note(stand_in, f"aioloader: the exception could not be pickled: {pickling_error!r}")
        return pickle.dumps(("error", job_id, stand_in), protocol=5)


def worker_main(worker: int, jobs: Connection, replies: Connection) -> None:
    """Build steps until the parent closes ``jobs`` (or dies)."""
    # Ctrl-C reaches the whole process group: the parent decides, and closes the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _serve(worker, jobs, replies)
    except (BrokenPipeError, ConnectionResetError):  # the parent is gone
        return


def _serve(worker: int, jobs: Connection, replies: Connection) -> None:
    try:
        transform, collator, reader = pickle.loads(jobs.recv_bytes())
    except EOFError:
        return
    except Exception:
        replies.send_bytes(pickle.dumps(("fatal", traceback.format_exc()), protocol=5))
        raise
    replies.send_bytes(pickle.dumps(("ready", os.getpid()), protocol=5))
    arena = WorkerArena()
    while True:
        try:
            message = jobs.recv_bytes()
        except EOFError:  # the parent closed the pipe or died
            return
        job_id, freed, sizes = pickle.loads(message)
        arena.free(freed)
        try:
            payload = jobs.recv_bytes()
            buffers = [bytearray(size) for size in sizes]  # writable, as the parent's were
            for buffer in buffers:
                jobs.recv_bytes_into(buffer)
        except EOFError:
            return
        plan, samples = pickle.loads(payload, buffers=buffers)
        del payload, buffers
        try:
            if samples is None:  # a sync dataset, read here: only the plan came
                samples = read_chunk(reader, plan, 0, plan.size)
            batch = build_batch(plan, samples, transform, collator)
        except Exception as error:
            replies.send_bytes(_error_reply(job_id, error, worker))
            continue
        try:
            stored = arena.store(batch)
        except Exception as error:
            add_note(
                error,
                f"aioloader: the batch of global step {plan.global_step} could not be sent "
                "from the worker process (it must pickle; arrays travel in shared memory)",
            )
            replies.send_bytes(_error_reply(job_id, error, worker))
            continue
        finally:
            release_batch(batch)
        replies.send_bytes(pickle.dumps(("batch", job_id, stored), protocol=5))
        if stored.new_fd is not None:
            send_handle(replies, stored.new_fd, os.getppid())


__all__ = ["worker_main"]
