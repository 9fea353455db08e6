"""torch: ``torch.utils.data.DataLoader`` with a workload's dataset, our order and a collate_fn."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import harness
import numpy as np

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


class KeyedDataset:
    """Map-style: the key the ``StepSampler`` gives (its index last) -> ``(key, work(sample))``;
    a plain index (``key="index"``) -> ``work(sample)``."""

    def __init__(self, samples: list[Any], work: Callable[[Any], Any] = lambda x: x) -> None:
        self.samples, self.work = samples, work

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int):
            return self.work(self.samples[key])
        return key, self.work(self.samples[key[-1]])


class PlanCollate:
    """A collator over ``KeyedDataset`` items keyed ``(g, index)``: rebuilds step ``g``'s plan
    and calls ``collator(samples, plan)``; with ``tensors``, the batch leaves a worker as
    ``tensors(batch)``."""

    def __init__(
        self,
        collator: Callable[[list[Any], Any], Any],
        seed: int,
        steps_per_epoch: int,
        tensors: Callable[[Any], Any] | None = None,
    ) -> None:
        self.collator, self.seed, self.steps = collator, seed, steps_per_epoch
        self.tensors = tensors

    def __call__(self, items: list[tuple[tuple[int, int], Any]]) -> Any:
        from aioloader.core import BatchPlan

        g = items[0][0][0]
        epoch, step = divmod(g, self.steps)
        indices = np.array([key[1] for key, _ in items], dtype=np.int64)
        batch = self.collator([s for _, s in items], BatchPlan(self.seed, g, epoch, step, indices))
        return batch if self.tensors is None else self.tensors(batch)


def shared_tensors(fields: tuple[str, ...]) -> Callable[[Any], dict[str, Any]]:
    """The batch's ``fields`` copied into shared-memory tensors (what torch's
    ``default_collate`` does in a worker); the batch is released."""

    def convert(batch: Any) -> dict[str, Any]:
        import torch

        out = {}
        with batch:
            for name in fields:
                array = getattr(batch, name)
                dtype = torch.float32 if array.dtype == np.float32 else torch.int32
                storage = torch.empty(0, dtype=dtype)._typed_storage()._new_shared(array.size)
                tensor = torch.empty(0, dtype=dtype).new(storage).view(array.shape)
                tensor.numpy()[...] = array
                out[name] = tensor
        return out

    return convert


def copied_tensors(fields: tuple[str, ...]) -> Callable[[Any], dict[str, Any]]:
    """The batch's ``fields`` as ``torch.from_numpy`` of copies; the batch is released."""

    def convert(batch: Any) -> dict[str, Any]:
        import torch

        with batch:
            return {name: torch.from_numpy(np.array(getattr(batch, name))) for name in fields}

    return convert


def rows(
    workers: tuple[int, ...],
    parts: Callable[[int, int], tuple[Any, Any, Callable[[Any], Any]]],
    how: str,
) -> list[Torch]:
    """A ``Torch`` row per worker count; ``parts(workers, stop)`` gives its loader's parts."""
    return [Torch(w, functools.partial(parts, w), how) for w in workers]


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
