"""A one-line progress bar for long work, drawn only when the stream is a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``[#####.....] 5/10 label`` on one line of a terminal; silent otherwise.

    >>> import io
    >>> bar = Progress(3, "steps", stream=io.StringIO())  # not a terminal: draws nothing
    >>> bar.advance(); bar.done
    1
    """

    def __init__(self, total: int, label: str = "", *, stream: TextIO | None = None) -> None:
        self.total = max(1, total)
        self.label = label
        self.done = 0
        self._stream = sys.stderr if stream is None else stream
        self._enabled = bool(getattr(self._stream, "isatty", lambda: False)())
        self._started = time.perf_counter()
        self._drawn = 0.0

    def advance(self, count: int = 1, note: str = "") -> None:
        """Count ``count`` more units of work and redraw (at most ten times a second)."""
        self.done = min(self.total, self.done + count)
        now = time.perf_counter()
        if not self._enabled or (now - self._drawn < 0.1 and self.done < self.total):
            return
        self._drawn = now
        width = 30
        filled = width * self.done // self.total
        elapsed = now - self._started
        rate = f" {self.done / elapsed:,.0f}/s" if elapsed > 0 else ""
        self._stream.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
            f"{self.label}{rate} {note}".rstrip()
        )
        if self.done >= self.total:
            self._stream.write("\n")
        self._stream.flush()
