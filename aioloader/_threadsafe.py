"""Calling into the running event loop from another thread, on asyncio and trio alike.

A neutral module: the engine's build threads and worker-process pipes and the sources'
shared limits all wake their event loop this way, and ``engine/`` and ``sources/`` may not
import each other (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


def threadsafe_caller() -> Callable[[Callable[[], object]], object]:
    """``call(fn)`` from any thread runs ``fn`` soon on the running event loop's thread.

    Call it on the event loop's thread (it looks the loop up); hand the result to threads.
    """
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:  # not on asyncio: trio (the only other backend anyio runs)
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon
