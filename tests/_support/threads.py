"""Threads a test started end: joined, never waited for by sleeping."""

from __future__ import annotations

import threading


def assert_threads_started_since_end(before: set[threading.Thread]) -> None:
    """Every thread alive now and not in ``before`` ends (30 s each: a hang guard only)."""
    for thread in set(threading.enumerate()) - before:
        thread.join(timeout=30)
        assert not thread.is_alive(), thread
