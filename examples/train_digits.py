"""Train a small CNN on scikit-learn's digits through aioloader; stop, resume, same losses.

The 8x8 digit images ship with scikit-learn (no download). An async dataset serves them,
``ShuffledSampler`` orders each epoch, a transform shifts each image by up to one pixel
(drawn from the sample's rng) and ``GainOffset`` jitters brightness. Every batch is a pure
function of ``(seed, step)``, so a run stopped mid-epoch and resumed from
``{loader.state_dict(), model and optimizer state}`` repeats the uninterrupted run's losses
bit for bit.

    python examples/train_digits.py                   # full run, then its test accuracy
    python examples/train_digits.py --stop-at-step 300 --checkpoint ckpt.pt   # "crash"
    python examples/train_digits.py --resume --checkpoint ckpt.pt             # go on
    python examples/train_digits.py --epochs 2 --check-resume   # both ways, compared
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import numpy as np
import numpy.typing as npt
import torch
from sklearn.datasets import load_digits
from torch import nn

from aioloader import (
    DataLoader,
    GainOffset,
    ImageBatch,
    ImageBatchCollator,
    ImageSample,
    SampleRng,
    ShuffledSampler,
    takes_rng,
)
from aioloader.interop.torch import to_torch

SEED = 2024
BATCH_SIZE = 32
TEST_SIZE = 360
EPOCHS = 12


@dataclass(frozen=True)
class Digits:
    """The fixed train/test split: float32 images ``[N, 1, 8, 8]`` in [0, 1], int labels."""

    train_images: npt.NDArray[np.float32]
    train_labels: npt.NDArray[np.int64]
    test_images: npt.NDArray[np.float32]
    test_labels: npt.NDArray[np.int64]


def load_split() -> Digits:
    """scikit-learn's 1797 digits, 360 held out for the test (a fixed permutation)."""
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(labels))
    test, train = order[:TEST_SIZE], order[TEST_SIZE:]
    return Digits(images[train], labels[train], images[test], labels[test])


class DigitsDataset:
    """The training images as ``ImageSample`` objects, read with ``async get_sample``."""

    def __init__(self, images: npt.NDArray[np.float32], labels: npt.NDArray[np.int64]) -> None:
        self._images = images
        self._labels = labels

    def __len__(self) -> int:
        return len(self._labels)

    async def get_sample(self, index: int) -> ImageSample:
        """Image ``index`` (``[1, 8, 8]``) with its label."""
        return ImageSample(self._images[index], label=int(self._labels[index]))


@takes_rng
def random_shift(sample: ImageSample, rng: SampleRng) -> ImageSample:
    """Move the image by -1, 0 or 1 pixel on each axis (zeros come in); a new sample."""
    dy, dx = rng.next_int(3) - 1, rng.next_int(3) - 1
    image = sample.image
    height, width = image.shape[1], image.shape[2]
    shifted = np.zeros_like(image)
    shifted[:, max(dy, 0) : height + min(dy, 0), max(dx, 0) : width + min(dx, 0)] = image[
        :, max(-dy, 0) : height + min(-dy, 0), max(-dx, 0) : width + min(-dx, 0)
    ]
    return ImageSample(shifted, sample.target, sample.label)


def make_loader(digits: Digits) -> DataLoader[ImageSample, ImageBatch]:
    """The augmented training stream: epoch ``e`` is steps ``[e*S, (e+1)*S)``."""
    return DataLoader(
        DigitsDataset(digits.train_images, digits.train_labels),
        ShuffledSampler(len(digits.train_labels), BATCH_SIZE),
        ImageBatchCollator(augment=GainOffset(gain_std=0.1, offset_std=0.05)),
        seed=SEED,
        transform=random_shift,
        workers=1,
    )


def make_model() -> nn.Module:
    """A small CNN, initialised from ``torch.manual_seed(SEED)``."""
    torch.manual_seed(SEED)
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    )


@dataclass
class Trainer:
    """Everything a checkpoint holds: the loader's cursor, the model, the optimizer."""

    digits: Digits
    loader: DataLoader[ImageSample, ImageBatch] = field(init=False)
    model: nn.Module = field(init=False)
    optimizer: torch.optim.Optimizer = field(init=False)
    losses: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.loader = make_loader(self.digits)
        self.model = make_model()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=3e-3)

    def step(self, batch: ImageBatch) -> float:
        """One optimisation step on ``batch``; its loss."""
        tensors = to_torch(batch)  # shares the batch's buffers: no copy
        self.model.train()
        self.optimizer.zero_grad()
        logits = self.model(tensors.images)
        loss = nn.functional.cross_entropy(logits, tensors.labels.long())
        loss.backward()
        self.optimizer.step()
        return float(loss.item())

    async def train(self, stop: int) -> None:
        """Train from the loader's cursor up to global step ``stop``."""
        async with self.loader.stream(stop=stop) as batches:  # from the cursor, moving it
            async for batch in batches:
                with batch:  # the buffers go back to the pool after the step
                    # The step runs in a thread so the event loop keeps reading ahead.
                    self.losses.append(await anyio.to_thread.run_sync(self.step, batch))

    def accuracy(self) -> float:
        """Fraction of the test images classified correctly."""
        self.model.eval()
        with torch.no_grad():
            logits = self.model(torch.from_numpy(self.digits.test_images))
        predicted = logits.argmax(dim=1).numpy()
        return float(np.mean(predicted == self.digits.test_labels))

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint."""
        return {
            "loader": self.loader.state_dict(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "losses": list(self.losses),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state_dict()``."""
        self.loader.load_state_dict(state["loader"])
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.losses = list(state["losses"])


async def check_resume(digits: Digits, total: int, stop_at: int, path: Path) -> Trainer:
    """Run uninterrupted, then stopped at ``stop_at`` and resumed; the losses must match."""
    if not 0 < stop_at < total:
        raise ValueError(f"stop_at must be in [1, {total}) (the steps to train) but got {stop_at}")
    whole = Trainer(digits)
    await whole.train(total)
    first = Trainer(digits)
    await first.train(stop_at)
    torch.save(first.state_dict(), path)
    resumed = Trainer(digits)
    resumed.load_state_dict(torch.load(path, weights_only=True))
    await resumed.train(total)
    if resumed.losses != whole.losses:
        pairs = zip(resumed.losses, whole.losses, strict=True)
        differ = next(i for i, (a, b) in enumerate(pairs) if a != b)
        raise AssertionError(
            f"losses after resuming at step {stop_at} must equal the uninterrupted run's "
            f"but step {differ} gives {resumed.losses[differ]!r} != {whole.losses[differ]!r}"
        )
    print(f"resumed at step {stop_at}: {len(whole.losses)} losses identical to the bit")
    return resumed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="epochs to train")
    parser.add_argument(
        "--stop-at-step", type=int, default=None, help="stop at this global step and save"
    )
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    parser.add_argument(
        "--check-resume",
        action="store_true",
        help="also stop mid-way (--stop-at-step, default mid-epoch half-way), resume, compare",
    )
    parser.add_argument("--checkpoint", type=Path, default=None, help="checkpoint file")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    for name in ("epochs", "stop_at_step", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1 but got {value}")
    if args.resume and (args.checkpoint is None or args.check_resume):
        parser.error("--resume needs --checkpoint and excludes --check-resume")
    return args


async def run(args: argparse.Namespace) -> Trainer:
    """Train as ``args`` say; the trainer at the end."""
    torch.set_num_threads(args.threads)  # a fixed thread count keeps the sums' order fixed
    digits = load_split()
    trainer = Trainer(digits)
    total = args.epochs * trainer.loader.steps_per_epoch
    checkpoint = args.checkpoint or Path(tempfile.mkdtemp()) / "digits.pt"
    if args.check_resume:
        stop_at = args.stop_at_step
        if stop_at is None:
            stop_at = total // 2 + trainer.loader.steps_per_epoch // 3
        trainer = await check_resume(digits, total, stop_at, checkpoint)
    elif args.stop_at_step is not None:
        await trainer.train(min(args.stop_at_step, total))
        torch.save(trainer.state_dict(), checkpoint)
        print(f"stopped at step {trainer.loader.next_step}; checkpoint {checkpoint}")
    else:
        if args.resume:
            trainer.load_state_dict(torch.load(checkpoint, weights_only=True))
            print(f"resumed at step {trainer.loader.next_step} from {checkpoint}")
        await trainer.train(total)
    steps = trainer.loader.steps_per_epoch
    for start in range(0, len(trainer.losses), steps):
        mean = np.mean(trainer.losses[start : start + steps])
        print(f"epoch {start // steps}: mean loss {mean:.4f}")
    return trainer


def main(argv: list[str] | None = None) -> None:
    """Train, then print the test accuracy and the time taken."""
    started = time.perf_counter()
    trainer = anyio.run(run, parse_args(argv))
    accuracy = trainer.accuracy()
    seconds = time.perf_counter() - started
    steps = len(trainer.losses)
    print(f"test accuracy {accuracy:.2%} after {steps} steps in {seconds:.1f} s")


if __name__ == "__main__":
    main()
