"""What the micro-benchmarks share: options, event-loop backends, a timed stream, spreads."""

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

BACKENDS: dict[str, dict[str, Any]] = {  # name: keyword arguments of ``anyio.run``
    "asyncio": {"backend": "asyncio", "backend_options": {"use_uvloop": False}},
    "uvloop": {"backend": "asyncio", "backend_options": {"use_uvloop": True}},
    "trio": {"backend": "trio"},
}


def options(doc: str | None, **defaults: Any) -> argparse.Namespace:
    """The command line: ``--name VALUE`` for each default, of the default's type."""
    parser = argparse.ArgumentParser(description=doc)
    for name, default in defaults.items():
        parser.add_argument(f"--{name}", type=type(default), default=default)
    return parser.parse_args()


async def drain(loader: Any, steps: int) -> float:
    """Seconds to read batches ``[0, steps)`` of ``loader``."""
    started = time.perf_counter()
    async with loader.stream(0, steps) as batches:
        async for _ in batches:
            pass
    return time.perf_counter() - started


def spread(values: Sequence[float], spec: str) -> str:
    """``median | min | max`` of ``values``, each formatted with ``spec``."""
    return " | ".join(format(pick(values), spec) for pick in (statistics.median, min, max))
