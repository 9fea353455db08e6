"""The parent's side of one worker process: its pipes, its queue of jobs, its segments.

Also the small pieces ``ProcessBuilders`` shares with it: a job awaiting its batch, naming
an exit code.
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
from multiprocessing.process import BaseProcess
from typing import Any

from ._shm_pool import ParentSegments

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
    """One step sent to a worker: the caller's wake-up call, then its batch or error."""

    __slots__ = ("abandoned", "done", "error", "id", "result", "step", "wake")

    def __init__(self, job_id: int, step: int, wake: Callable[[], None]) -> None:
        self.id, self.step, self.wake = job_id, step, wake
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.abandoned = False


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


__all__ = [
    "Job",
    "WorkerHandle",
    "describe_exit",
    "widen_pipe",
]
