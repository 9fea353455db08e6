"""Feeding an existing synchronous PyTorch loop: tensors without copies."""

from __future__ import annotations

import torch
import torch.utils.data

from aioloader import DataLoader, GainOffset, ImageBatchCollator, ShuffledSampler
from aioloader.datasets import line_images
from aioloader.interop.torch import TorchIterableDataset, to_device


def main() -> None:
    loader = DataLoader(
        line_images(count=256),
        ShuffledSampler(256, 32),
        ImageBatchCollator(4, augment=GainOffset()),
        seed=0,
        workers=2,
    )
    adapter = TorchIterableDataset(loader, start=0, stop=8)
    model = torch.nn.Conv2d(1, 4, 3)
    for batch in torch.utils.data.DataLoader(adapter, batch_size=None, num_workers=0):
        batch = to_device(batch, "cpu")  # "cuda" with non_blocking=True, pin_memory=True on a GPU
        loss = model(batch.images).mean()
        loss.backward()
        print(batch.global_step, tuple(batch.images.shape), float(loss))


if __name__ == "__main__":
    main()
