"""SPDL: a ``PipelineBuilder`` pipeline mapping a step function over the steps, in order."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import harness


class Spdl(harness.Port):
    """``source(steps) -> pipe(step, concurrency=threads, output_order="input") -> sink``;
    ``step(g)`` is the workload's whole batch (plan, per-sample work, collate)."""

    group = "spdl"

    def __init__(self, step: Callable[[int], Any], threads: int, sink: int = 8) -> None:
        self.step, self.threads, self.sink = step, threads, sink
        self.name = f"SPDL pipeline {threads} thread{'s' if threads > 1 else ''}"
        self.note = (
            f"PipelineBuilder: source(steps) -> pipe(build_step, concurrency={threads}, "
            f"output_order='input') -> sink({sink}), build(num_threads={threads})"
        )

    @contextlib.contextmanager
    def batches(self, stop: int) -> Iterator[Iterator[Any]]:
        from spdl.pipeline import PipelineBuilder

        builder = PipelineBuilder().add_source(range(stop))
        builder.pipe(self.step, concurrency=self.threads, output_order="input")
        pipeline = builder.add_sink(self.sink).build(num_threads=self.threads)
        with pipeline.auto_stop():
            yield pipeline.get_iterator()
