"""The shape of torchvision's reference ImageFolder training script, reduced to the CPU, a
tiny model and a tiny generated image folder.

``reference_train_torch.py`` imports torch's ``DataLoader``, ``reference_train_aioloader.py``
aioloader's: that import is the one line the two files differ in. Both print the samples
each epoch trained and evaluated on.
Run: ``python examples/from_torch/reference_train_aioloader.py [--epochs 2] [--workers 0]``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils.data
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader

CLASSES = ("circles", "squares", "stripes")


def make_folder(root: Path, per_class: int) -> None:
    """``root/<class>/<n>.png``: small drawings, one class per folder."""
    rng = np.random.default_rng(0)
    for label, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for n in range(per_class):
            y, x = np.mgrid[:20, :20]
            shape = [(y - 10) ** 2 + (x - 10) ** 2 < 36, abs(y - 10) + 0 * x < 5, x % 4 < 2][label]
            pixels = rng.integers(0, 40, (20, 20, 3), dtype=np.uint8)
            pixels[shape] = 200
            Image.fromarray(pixels).save(root / name / f"{n:03d}.png")


class ImageFolder(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """torchvision's ``ImageFolder``, in short: ``root/<class>/<image>``, a transform."""

    def __init__(self, root: Path, transform: Any) -> None:
        self.classes = sorted(path.name for path in root.iterdir())
        self.samples = [
            (path, label)
            for label, name in enumerate(self.classes)
            for path in sorted((root / name).iterdir())
        ]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        with Image.open(path) as image:
            pixels = torch.from_numpy(np.asarray(image.convert("RGB"), dtype=np.float32) / 255)
        return self.transform(pixels.permute(2, 0, 1)), label


def train_transform(image: torch.Tensor) -> torch.Tensor:
    """A random 16x16 crop, flipped half the time (torch's global generator, as torchvision)."""
    top, left = (int(value) for value in torch.randint(0, 5, (2,)))
    crop = image[:, top : top + 16, left : left + 16]
    return crop.flip(2) if float(torch.rand(())) < 0.5 else crop


def eval_transform(image: torch.Tensor) -> torch.Tensor:
    return image[:, 2:18, 2:18]


def train_one_epoch(model: nn.Module, criterion: Any, optimizer: Any, data_loader: Any) -> int:
    model.train()
    seen = 0
    for image, target in data_loader:
        loss = criterion(model(image), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen += image.shape[0]
    return seen


def evaluate(model: nn.Module, data_loader: Any) -> tuple[int, int]:
    model.eval()
    seen = correct = 0
    with torch.inference_mode():
        for image, target in data_loader:
            correct += int((model(image).argmax(1) == target).sum())
            seen += image.shape[0]
    return seen, correct


def main(args: argparse.Namespace) -> None:
    torch.manual_seed(0)
    root = Path(tempfile.mkdtemp())
    make_folder(root / "train", 10)
    make_folder(root / "val", 3)
    dataset = ImageFolder(root / "train", train_transform)
    dataset_test = ImageFolder(root / "val", eval_transform)
    train_sampler = torch.utils.data.RandomSampler(dataset)
    test_sampler = torch.utils.data.SequentialSampler(dataset_test)
    data_loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=train_sampler,
        num_workers=args.workers,
        pin_memory=True,
    )
    data_loader_test = DataLoader(
        dataset_test, batch_size=args.batch_size, sampler=test_sampler, num_workers=args.workers
    )
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, len(dataset.classes)))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        trained = train_one_epoch(model, criterion, optimizer, data_loader)
        evaluated, correct = evaluate(model, data_loader_test)
        print(
            f"epoch {epoch}: trained on {trained} samples, evaluated {evaluated} ({correct} right)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=0)
    main(parser.parse_args())
