"""Grain: ``MapDataset.source(steps).map(step)``, read by threads or by ``mp_prefetch``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import harness


class Grain(harness.Port):
    """Threads: ``to_iter_dataset(ReadOptions(threads, prefetch))``. Processes: one reading
    thread, then ``mp_prefetch(MultiprocessingOptions(processes, buffer))``; spawned
    workers unpickle ``step``, which must rebuild its data there."""

    group = "grain"

    def __init__(
        self, step: Any, threads: int = 2, prefetch: int = 8, processes: int = 0, buffer: int = 4
    ) -> None:
        self.step, self.processes = step, processes
        self.read = {"num_threads": 1 if processes else threads, "prefetch_buffer_size": prefetch}
        self.workers = {"num_workers": processes, "per_worker_buffer_size": buffer}
        read, workers = (
            ", ".join(f"{k}={v}" for k, v in o.items()) for o in (self.read, self.workers)
        )
        if processes:
            self.name = f"Grain mp_prefetch {processes} processes"
            chain = f"to_iter_dataset().mp_prefetch(MultiprocessingOptions({workers}))"
        else:
            self.name = f"Grain {threads} threads"
            chain = f"to_iter_dataset(ReadOptions({read}))"
        self.note = f"MapDataset.source(steps).map(build_step).{chain}"

    @contextlib.contextmanager
    def batches(self, stop: int) -> Iterator[Iterator[Any]]:
        import grain
        from absl import flags

        if not flags.FLAGS.is_parsed():  # grain's workers read absl flags; no main() parsed them
            flags.FLAGS.mark_as_parsed()
        dataset = grain.MapDataset.source(range(stop)).map(self.step)
        iterable = dataset.to_iter_dataset(grain.ReadOptions(**self.read))
        if self.processes:
            iterable = iterable.mp_prefetch(grain.MultiprocessingOptions(**self.workers))
        iterator = iter(iterable)
        try:
            yield iterator
        finally:
            close = getattr(iterator, "close", None)
            if callable(close):
                close()
            del iterator
