"""W9's consumer: one training step per batch on the device, fed uint8 ``[B, H, W, 3]``.

The step normalises on the device (the uint8 HWC batch viewed as NCHW is channels-last
already), runs the model forward and backward under bf16 autocast and takes an SGD step.
``resnet50`` is torchvision's ResNet-50 in channels-last; ``tiny`` (the dry run) one
strided convolution, a pooling and a linear layer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
MODELS = ("resnet50", "tiny")


def pick_device(device: str) -> str:
    """``"auto"``: ``"cuda"`` when torch sees one, else ``"cpu"``; other names as given."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _model(name: str, classes: int) -> Any:
    import torch

    if name == "resnet50":
        import torchvision

        return torchvision.models.resnet50(weights=None, num_classes=classes)
    if name == "tiny":
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, kernel_size=8, stride=8),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(8, classes),
        )
    raise ValueError(f"model must be one of {MODELS} but got {name!r}")


class Trainer:
    """``step(images, labels)``: normalise, forward, backward, SGD step, on ``device``."""

    def __init__(self, device: str, model: str, classes: int = 1000) -> None:
        import torch

        self.device = torch.device(device)
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True
        self.model = _model(model, classes).to(self.device, memory_format=torch.channels_last)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        scale = {"device": self.device, "dtype": torch.float32}
        self.mean = torch.tensor(MEAN, **scale).view(1, 3, 1, 1) * 255  # type: ignore[arg-type]
        self.std = torch.tensor(STD, **scale).view(1, 3, 1, 1) * 255  # type: ignore[arg-type]

    def step(self, images: Any, labels: Any) -> None:
        import torch
        import torch.nn.functional as functional

        x = (images.permute(0, 3, 1, 2).float() - self.mean) / self.std  # channels-last
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            loss = functional.cross_entropy(self.model(x), labels)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def synchronize(self) -> None:
        """Wait for the device's queued work (a no-op on the CPU)."""
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def synthetic(batch: int, size: int, device: str) -> Any:
    """``stop -> context over stop copies of one batch already on the device`` (the upper
    bound: no loader, no copy); random pixels and labels, fixed."""
    import torch

    generator = torch.Generator().manual_seed(9)
    images = torch.randint(0, 256, (batch, size, size, 3), dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, 10, (batch,), dtype=torch.int64, generator=generator)
    indices = torch.arange(batch, dtype=torch.int64)
    on_device = {"images": images, "labels": labels, "indices": indices}
    on_device = {name: value.to(device) for name, value in on_device.items()}

    @contextlib.contextmanager
    def open_sync(stop: int) -> Iterator[Iterator[Any]]:
        yield iter([on_device] * stop)

    return open_sync
