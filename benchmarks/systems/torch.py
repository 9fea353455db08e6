"""torch: ``torch.utils.data.DataLoader`` over a workload's samples, in our sampler's order."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import harness
import numpy as np

from aioloader.core import BatchPlan, SampleRng, derive


class Dataset:
    """Map-style: an index -> ``work(sample)``; a key ``(g, slot, index)`` -> ``(key,
    work(sample))``, or given ``rng=(seed, steps_per_epoch)`` ``(key, work(sample, rng))``
    with the rng aioloader gives that sample."""

    def __init__(
        self, samples: list[Any], work: Callable[..., Any] = lambda x: x, rng: Any = None
    ) -> None:
        self.samples, self.work, self.rng = samples, work, rng

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int):
            return self.work(self.samples[key])
        if self.rng is None:
            return key, self.work(self.samples[key[2]])
        (g, slot, index), (seed, steps_per_epoch) = key, self.rng
        rng = SampleRng(derive(seed, *divmod(g, steps_per_epoch), slot, 0))
        return key, self.work(self.samples[index], rng)


class PlanCollate:
    """``collator(samples, plan)`` over keyed items, step ``g``'s plan rebuilt. With
    ``fields``, the batch leaves a worker as tensors and is released: in shared memory
    (``shared``, as torch's ``default_collate`` makes them), else copies."""

    def __init__(
        self, collator: Any, sampler: Any, seed: int, fields: Any = (), shared: bool = False
    ) -> None:
        self.collator, self.steps, self.seed = collator, sampler.steps_per_epoch, seed
        self.fields, self.shared = fields, shared

    def __call__(self, items: list[tuple[tuple[int, int, int], Any]]) -> Any:
        g = items[0][0][0]
        indices = np.array([key[2] for key, _ in items], dtype=np.int64)
        plan = BatchPlan(self.seed, g, *divmod(g, self.steps), indices)
        batch = self.collator([sample for _, sample in items], plan)
        if not self.fields:
            return batch
        import torch

        out = {}
        with batch:
            for name in self.fields:
                array = getattr(batch, name)
                if not self.shared:
                    out[name] = torch.from_numpy(np.array(array))
                    continue
                dtype = torch.float32 if array.dtype == np.float32 else torch.int32
                storage = torch.empty(0, dtype=dtype)._typed_storage()._new_shared(array.size)
                out[name] = torch.empty(0, dtype=dtype).new(storage).view(array.shape)
                out[name].numpy()[...] = array
        return out


class Torch(harness.Port):
    """``DataLoader(dataset, batch_sampler=our steps, collate_fn, num_workers,
    prefetch_factor=4)``; a ``PlanCollate`` is given each step's indices as keys ``(g, slot,
    index)``, a user's collate function plain indices."""

    group = "torch"

    def __init__(
        self,
        workers: int,
        how: str,
        dataset: Any,
        sampler: Any,
        seed: int,
        collate: Any,
        **options: Any,
    ) -> None:
        self.workers, self.dataset, self.collate = workers, dataset, collate
        self.sampler, self.seed, self.keyed = sampler, seed, isinstance(collate, PlanCollate)
        self.name = f"torch DataLoader num_workers={workers}"
        # ``options``: more DataLoader arguments (W9: pin_memory, persistent_workers), which
        # replace the default prefetch_factor=4 (None: torch's own default)
        self.options = {"prefetch_factor": 4 if workers else None, **options}
        shown = "".join(f", {key}={value!r}" for key, value in self.options.items())
        shown = shown.replace(", prefetch_factor=None", "")
        self.note = f"torch.utils.data.DataLoader(num_workers={workers}{shown}), {how}"

    def steps(self, stop: int) -> Iterator[list[Any]]:
        for g in range(stop):
            epoch, step = divmod(g, self.sampler.steps_per_epoch)
            indices = self.sampler.indices(self.seed, epoch, step).tolist()
            yield [(g, slot, i) for slot, i in enumerate(indices)] if self.keyed else indices

    @contextlib.contextmanager
    def batches(self, stop: int) -> Iterator[Iterator[Any]]:
        import torch.utils.data

        loader = torch.utils.data.DataLoader(
            self.dataset,
            batch_sampler=self.steps(stop),
            collate_fn=self.collate,
            num_workers=self.workers,
            **self.options,
        )
        iterator = iter(loader)
        try:
            yield iterator
        finally:
            del iterator
