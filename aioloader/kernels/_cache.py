"""Filling numba's on-disk kernel cache in a child process, so that no thread of ours compiles.

The first ``Filler.poll()`` launches a fresh interpreter (``subprocess``: spawned, never
forked) that loads every kernel of ``_batch`` and ``_image_chain``: each one is found in
numba's cache, or compiled and written there. The child prints ``{"compiling": true}`` when
its first compilation starts (``Filler.compiles()`` waits for that news), then
``{"failure": ...}``.
The parent keeps building batches with numpy meanwhile; ``poll()`` tells it, without
waiting, when the cache is full, and the parent then loads the kernels from it (numba's
import and set-up, then tens of milliseconds per kernel; no compilation).

The child never delays the parent's exit: an ``atexit`` hook kills it (numba writes each
cache file under a temporary name and renames it, so a kill leaves no half-written entry),
and the child also ends itself when its stdin closes, i.e. when the parent is gone however
it ended. Children of the same cache take turns (a file lock), so N processes starting at
once compile once, not N times; processes started after the cache is full (the loader's
worker processes) learn it from an environment variable and start no child.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable

FILLING, FILLED, FAILED = "filling", "filled", "failed"
FILLED_MARK = "AIOLOADER_KERNEL_CACHE_FILLED"
"""Set to ``lock_path()`` once a child filled the cache, so that processes started later
(say, the loader's worker processes) find it full without a child of their own."""

_CHILD = """
import json, sys
sys.path[:0] = json.loads(sys.argv[1])
from aioloader.kernels._cache import child_main
child_main()
"""


COMPILING = {"compiling": True}
"""What the child prints when its first compilation starts (a kernel not in the cache)."""


def load_every_kernel(on_compile: Callable[[], None] | None = None) -> str | None:
    """Import the kernels and load (or compile) every one; what went wrong, or ``None``.

    ``on_compile`` is called once, when the first compilation starts (none: all cached).
    """
    try:
        from . import _batch, _image_chain

        if _batch.HEADER is None:
            return "numpy's array object layout is not the expected one"
        if on_compile is None:
            _batch.load_all()
            _image_chain.load_all()
        else:
            from numba.core import event

            with event.install_listener("numba:compile", _first_compile(on_compile)):
                _batch.load_all()
                _image_chain.load_all()
    except Exception as error:  # numba missing or broken: the reference runs
        return f"{type(error).__name__}: {error}"
    return None


def _first_compile(on_compile: Callable[[], None]) -> object:
    """A numba event listener that calls ``on_compile`` at the first compilation's start."""
    from numba.core import event

    class FirstCompile(event.Listener):
        called = False

        def on_start(self, _event: object) -> None:
            if not self.called:
                self.called = True
                on_compile()

        def on_end(self, _event: object) -> None:
            pass

    return FirstCompile()


def lock_path() -> str:
    """The lock file that children filling the same cache share (per user and cache)."""
    key = f"{os.environ.get('NUMBA_CACHE_DIR', '')}|{os.path.dirname(__file__)}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    user = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"aioloader-kernels-{user}-{digest}.lock")


def child_main() -> None:
    """The child's body: fill the cache, print ``{"failure": ...}`` and exit."""
    stdin = sys.stdin.buffer

    def end_with_parent() -> None:
        stdin.read()  # EOF: the parent closed the pipe or is gone
        os._exit(0)  # never runs finalizers, so safe while LLVM compiles

    threading.Thread(target=end_with_parent, daemon=True).start()
    with open(lock_path(), "a") as lock:
        try:
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX)  # another child compiles: wait, then load
        except ImportError:  # no fcntl (Windows): fill side by side
            pass
        failure = load_every_kernel(_say_compiling)
    sys.stdout.write(json.dumps({"failure": failure}) + "\n")
    sys.stdout.flush()
    os._exit(0)


def _say_compiling() -> None:
    sys.stdout.write(json.dumps(COMPILING) + "\n")
    sys.stdout.flush()


class Filler:
    """At most one child filling the cache for this process; ``poll()`` never waits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()  # the child's output: read, then closed
        self._child: subprocess.Popen[bytes] | None = None
        self._state: str | None = None
        self._lines: list[str] = []  # what the child printed, read so far
        self.failure: str | None = None
        atexit.register(self.stop)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forget)

    @property
    def pid(self) -> int | None:
        """The running child's process id, if one runs."""
        child = self._child
        return None if child is None or self._state != FILLING else child.pid

    def poll(self) -> str:
        """``FILLING`` (started now if need be), ``FILLED`` or ``FAILED``; never blocks."""
        with self._lock:
            if self._state is None:
                self._start()
            elif self._state == FILLING:
                assert self._child is not None
                if self._child.poll() is not None:
                    self._finish()
            return self._state or FAILED

    def wait(self) -> str:
        """Wait for a running child (the GIL is released meanwhile); the final state."""
        child = self._child
        if child is not None and self._state == FILLING:
            child.wait()
        with self._lock:
            if self._state == FILLING:
                self._finish()
            return self._state or FAILED

    def compiles(self) -> bool:
        """Wait until the running child says whether it compiles; ``True`` when it does.

        It says so at its first compilation, or ends: this waits only while it takes its
        turn on the cache's lock and finds kernels in the cache. ``False`` with no child
        running (none started, or it has ended).
        """
        with self._read_lock:
            child = self._child
            if child is not None and self._state == FILLING and not self._lines:
                assert child.stdout is not None
                line = child.stdout.readline().decode(errors="replace").strip()
                if line:
                    self._lines.append(line)
            compiling = bool(self._lines) and self._lines[0] == json.dumps(COMPILING)
            return compiling and self._state == FILLING

    def stop(self) -> None:
        """Kill a running child now (at exit: the parent never waits for a compiler)."""
        with self._lock:
            child = self._child
            if child is not None and self._state == FILLING:
                child.kill()
                child.wait()
                with self._read_lock:
                    self._close(child)
                self._state, self.failure = FAILED, "stopped before the cache was filled"

    def _start(self) -> None:
        if os.environ.get(FILLED_MARK) == lock_path():
            self._state = FILLED
            return
        try:
            self._child = subprocess.Popen(
                [sys.executable, "-c", _CHILD, json.dumps(sys.path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError as error:
            self._state, self.failure = FAILED, f"cannot start the cache filler: {error}"
            return
        self._state = FILLING

    def _finish(self) -> None:
        child = self._child
        assert child is not None
        assert child.stdout is not None
        with self._read_lock:
            rest = child.stdout.read().decode(errors="replace").strip().splitlines()
            child.wait()
            self._close(child)
            self.failure = _reported_failure(self._lines + rest, child.returncode)
            self._state = FAILED if self.failure else FILLED
        if self._state == FILLED:
            os.environ[FILLED_MARK] = lock_path()

    @staticmethod
    def _close(child: subprocess.Popen[bytes]) -> None:
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()

    def _forget(self) -> None:
        """In a forked child: the parent's filler is not ours; start afresh if asked."""
        self._lock, self._read_lock = threading.Lock(), threading.Lock()
        self._child, self._state, self.failure = None, None, None
        self._lines = []


def _reported_failure(output: list[str], returncode: int) -> str | None:
    """What the child's last line says went wrong (``None``: the cache is full)."""
    if not output:
        return f"the cache filler exited with status {returncode} and printed nothing"
    try:
        failure = json.loads(output[-1])["failure"]
    except (ValueError, KeyError, TypeError):
        return f"the cache filler printed {output[-1]!r}"
    return None if failure is None else str(failure)
