"""Grain: ``MapDataset.source(steps).map(step)``, read by threads or by ``mp_prefetch``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import harness


class Grain(harness.Port):
    """Threads: ``to_iter_dataset(ReadOptions(threads, prefetch))``. Processes: one reading
    thread, then ``mp_prefetch(MultiprocessingOptions(processes, per_worker))``; spawned
    workers unpickle ``step``, which must rebuild its data there.
    """

    group = "grain"

    def __init__(
        self,
        step: Callable[[int], Any],
        threads: int = 2,
        prefetch: int = 8,
        processes: int = 0,
        per_worker: int = 4,
    ) -> None:
        self.step, self.threads, self.prefetch = step, threads, prefetch
        self.processes, self.per_worker = processes, per_worker
        if processes:
            self.name = f"Grain mp_prefetch {processes} processes"
            self.note = (
                "MapDataset.source(steps).map(build_step).to_iter_dataset()"
                f".mp_prefetch(MultiprocessingOptions(num_workers={processes}, "
                f"per_worker_buffer_size={per_worker}))"
            )
        else:
            self.name = f"Grain {threads} threads"
            self.note = (
                "MapDataset.source(steps).map(build_step)"
                f".to_iter_dataset(ReadOptions(num_threads={threads}, "
                f"prefetch_buffer_size={prefetch}))"
            )

    @contextlib.contextmanager
    def batches(self, stop: int) -> Iterator[Iterator[Any]]:
        import grain
        from absl import flags

        if not flags.FLAGS.is_parsed():  # grain's workers read absl flags; no main() parsed them
            flags.FLAGS.mark_as_parsed()
        dataset = grain.MapDataset.source(range(stop)).map(self.step)
        if self.processes:
            options = grain.MultiprocessingOptions(
                num_workers=self.processes, per_worker_buffer_size=self.per_worker
            )
            iterable = dataset.to_iter_dataset(
                grain.ReadOptions(num_threads=1, prefetch_buffer_size=self.prefetch)
            ).mp_prefetch(options)
        else:
            iterable = dataset.to_iter_dataset(
                grain.ReadOptions(num_threads=self.threads, prefetch_buffer_size=self.prefetch)
            )
        iterator = iter(iterable)
        try:
            yield iterator
        finally:
            close = getattr(iterator, "close", None)
            if callable(close):
                close()
            del iterator
