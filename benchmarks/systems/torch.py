"""torch: ``torch.utils.data.DataLoader`` with a workload's dataset, our order and a collate_fn."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import harness

# (dataset, batch_sampler, collate_fn) of the steps [0, stop)
Parts = Callable[[int], tuple[Any, Any, Callable[[Any], Any]]]


class StepSampler:
    """A torch batch sampler: step ``g``'s indices of our sampler, for ``g`` in ``[0, stop)``.

    ``key`` says what each element is: ``"index"``, ``"step"`` (``(g, index)``) or
    ``"slot"`` (``(g, slot, index)``), for datasets whose work depends on the step or slot.
    """

    def __init__(self, sampler: Any, seed: int, stop: int, key: str = "step") -> None:
        self.sampler, self.seed, self.stop, self.key = sampler, seed, stop, key

    def __len__(self) -> int:
        return self.stop

    def __iter__(self) -> Iterator[list[Any]]:
        steps = self.sampler.steps_per_epoch
        for g in range(self.stop):
            epoch, step = divmod(g, steps)
            indices = self.sampler.indices(self.seed, epoch, step).tolist()
            if self.key == "index":
                yield indices
            elif self.key == "step":
                yield [(g, i) for i in indices]
            else:
                yield [(g, slot, i) for slot, i in enumerate(indices)]


class Torch(harness.Port):
    """``DataLoader(dataset, batch_sampler, collate_fn, num_workers, prefetch_factor=4)``."""

    group = "torch"

    def __init__(self, workers: int, parts: Parts, how: str) -> None:
        self.workers, self.parts = workers, parts
        self.name = f"torch DataLoader num_workers={workers}"
        self.note = (
            f"torch.utils.data.DataLoader(num_workers={workers}"
            + (", prefetch_factor=4" if workers else "")
            + f"), {how}"
        )

    @contextlib.contextmanager
    def batches(self, stop: int) -> Iterator[Iterator[Any]]:
        import torch.utils.data

        dataset, batch_sampler, collate = self.parts(stop)
        loader = torch.utils.data.DataLoader(
            dataset,
            batch_sampler=batch_sampler,
            collate_fn=collate,
            num_workers=self.workers,
            prefetch_factor=4 if self.workers else None,
        )
        iterator = iter(loader)
        try:
            yield iterator
        finally:
            del iterator
