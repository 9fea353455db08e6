"""A folder of PNG and JPEG files in shuffled batches: stop, save the state, resume exactly.

Needs Pillow: ``pip install 'aioloader[images]'``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import anyio
import numpy as np
from PIL import Image

from aioloader import DataLoader, ImageFolder, ShuffledSampler, TreeCollator

CLASSES = ("circle", "square", "stripes")


def make_folder(root: Path, per_class: int = 8) -> None:
    """``root/<class>/<n>.png|.jpg``: small drawings of varied sizes, half PNG, half JPEG."""
    rng = np.random.default_rng(0)
    for label, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for n in range(per_class):
            height, width = rng.integers(24, 48, size=2)
            y, x = np.mgrid[:height, :width]
            shape = [
                (y - height / 2) ** 2 + (x - width / 2) ** 2 < (min(height, width) / 3) ** 2,
                (abs(y - height / 2) < height / 4) & (abs(x - width / 2) < width / 4),
                (x // 4) % 2 == 0,
            ][label]
            pixels = np.zeros((height, width, 3), np.uint8)
            pixels[shape] = rng.integers(64, 256, size=3, dtype=np.uint8)
            suffix = ".png" if n % 2 == 0 else ".jpg"
            Image.fromarray(pixels).save(root / name / f"{n:03d}{suffix}")


def make_loader(root: Path) -> DataLoader[object, object]:
    images = ImageFolder(root, size=(32, 32))  # decoded in threads, center-cropped, CHW float
    return DataLoader(images, ShuffledSampler(len(images), 4), TreeCollator(), seed=11, workers=2)


async def main() -> None:
    root = Path(tempfile.mkdtemp()) / "shapes"
    make_folder(root)
    checkpoint = root.parent / "loader.json"

    first = make_loader(root)
    async for batch in first:  # "train" three steps of the epoch, save, and "crash"
        assert batch.data.image.shape == (4, 3, 32, 32)
        if batch.global_step == 2:
            break
    checkpoint.write_text(json.dumps(first.state_dict()))

    resumed = make_loader(root)
    resumed.load_state_dict(json.loads(checkpoint.read_text()))
    after_restart = [(b.global_step, b.data) async for b in resumed]  # rest of the epoch
    uninterrupted = [(b.global_step, b.data) async for b in make_loader(root)]

    assert [step for step, _ in after_restart] == [3, 4, 5]
    for (step, got), (_, expected) in zip(after_restart, uninterrupted[3:], strict=True):
        assert np.array_equal(got.image, expected.image), step
        assert got.label.tolist() == expected.label.tolist(), step
    labels = [data.label.tolist() for _, data in uninterrupted]
    print(f"{len(first.dataset)} images of {len(CLASSES)} classes, batches of labels {labels}")
    print(f"resumed at {json.loads(checkpoint.read_text())}: steps 3..5 identical")


if __name__ == "__main__":
    anyio.run(main)
