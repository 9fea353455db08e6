"""The parent's side of one worker process: its process and pipes, its outbox, the jobs
it owes and the segments it may reuse (``WorkerHandle``), and one step sent to it (``Job``).

``start_worker`` starts the process with its two pipes: jobs go down a one-way pipe (widened
on Linux), replies and segment descriptors come back over a Unix socket. ``ProcessBuilders``
runs the threads that use them.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

from ..core import BatchPlan
from ._process_worker import worker_main
from ._shm_pool import ParentSegments

__all__ = ("Job", "WorkerHandle", "describe_exit", "start_worker", "widen_pipe")

_F_SETPIPE_SZ = 1031


def describe_exit(exitcode: int | None) -> str:
    """``"exit code 3"``, ``"exit code -9 (SIGKILL)"``."""
    if exitcode is None:
        return "an unknown exit code"
    if exitcode < 0:
        with contextlib.suppress(ValueError):
            return f"exit code {exitcode} ({signal.Signals(-exitcode).name})"
    return f"exit code {exitcode}"


def widen_pipe(fd: int) -> None:
    """Ask Linux for a 1 MiB pipe (fewer wake-ups per step's samples); fine if refused."""
    if sys.platform == "linux":
        import fcntl

        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, _F_SETPIPE_SZ, 1 << 20)


class Job:
    """One step sent to a worker: the caller's wake-up call, then its batch or error.

    ``planner`` (a job from ``submit``): the sender thread plans the step itself.
    """

    __slots__ = ("abandoned", "done", "error", "id", "planner", "result", "step", "wake")

    def __init__(
        self,
        job_id: int,
        step: int,
        wake: Callable[[], None],
        planner: Callable[[int], BatchPlan] | None = None,
    ) -> None:
        self.id, self.step, self.wake, self.planner = job_id, step, wake, planner
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.abandoned = False

    def hand_over(self) -> tuple[Any, BaseException | None]:
        """The batch and the error, which the job no longer holds."""
        result, error, self.result, self.error = self.result, self.error, None, None
        return result, error


class WorkerHandle:
    """A worker process with its pipes, outbox, pending jobs and freed segments."""

    __slots__ = (
        "alive",
        "fatal",
        "freed",
        "index",
        "jobs",
        "outbox",
        "pending",
        "pid",
        "process",
        "ready",
        "replies",
        "segments",
        "sender",
    )

    def __init__(self, index: int, process: BaseProcess, jobs: Any, replies: Any) -> None:
        self.index, self.process = index, process
        self.jobs: Connection = jobs
        self.replies: Connection = replies
        self.outbox: queue.SimpleQueue[tuple[Job, bytes, list[memoryview]] | None] = (
            queue.SimpleQueue()
        )
        self.pending: collections.deque[Job] = collections.deque()
        self.freed: list[int] = []
        self.segments = ParentSegments()
        self.alive = True
        self.ready = False
        self.pid = 0
        self.fatal = ""
        self.sender: threading.Thread | None = None


def start_worker(context: BaseContext, index: int) -> WorkerHandle:
    """Start worker ``index`` in ``context`` with its pipes; the parent keeps its ends."""
    jobs_read, jobs_write = context.Pipe(duplex=False)
    widen_pipe(jobs_write.fileno())
    replies, child_replies = context.Pipe(duplex=True)  # a Unix socket: fds pass
    process = context.Process(  # type: ignore[attr-defined]
        target=worker_main,
        args=(index, jobs_read, child_replies),
        name=f"aioloader-build-{index}",
        daemon=True,
    )
    process.start()
    jobs_read.close()
    child_replies.close()
    return WorkerHandle(index, process, jobs_write, replies)
