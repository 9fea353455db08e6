"""examples/train_digits.py: stopping and resuming repeats the losses exactly; it learns."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import numpy as np
import pytest
import torch

from aioloader import ImageSample, SampleRng

PATH = Path(__file__).resolve().parents[1] / "examples" / "train_digits.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_digits", PATH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_digits"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_random_shift_moves_by_the_drawn_offsets(example: ModuleType) -> None:
    image = np.arange(9, dtype=np.float32).reshape(1, 3, 3)
    draws = SampleRng(13)
    dy, dx = draws.next_int(3) - 1, draws.next_int(3) - 1
    assert (dy, dx) == (1, -1)
    shifted = example.random_shift(ImageSample(image, label=4), SampleRng(13))
    assert shifted.label == 4
    assert shifted.image.tolist() == [[[0.0, 0.0, 0.0], [1.0, 2.0, 0.0], [4.0, 5.0, 0.0]]]
    assert image.tolist() == [[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]]


@pytest.mark.slow  # trains three times
@pytest.mark.usefixtures("threads")
def test_stop_and_resume_repeat_the_uninterrupted_losses(
    example: ModuleType, tmp_path: Path
) -> None:
    def run(*flags: str) -> Any:
        return anyio.run(example.run, example.parse_args(["--epochs", "2", *flags]))

    checkpoint = str(tmp_path / "digits.pt")
    whole = run()
    stopped = run("--stop-at-step", "57", "--checkpoint", checkpoint)  # mid-epoch 1
    resumed = run("--resume", "--checkpoint", checkpoint)
    assert len(whole.losses) == 88
    assert stopped.loader.next_step == 57
    assert resumed.losses[:57] == stopped.losses
    assert resumed.losses == whole.losses
    assert resumed.accuracy() == whole.accuracy()
    assert whole.accuracy() >= 0.85  # 91.1% measured


@pytest.mark.usefixtures("threads")
def test_check_resume_refuses_a_stop_outside_the_run(example: ModuleType) -> None:
    digits = example.load_split()
    with pytest.raises(ValueError, match="stop_at") as info:
        anyio.run(example.check_resume, digits, 44, 44, Path("unused.pt"))
    assert str(info.value) == "stop_at must be in [1, 44) (the steps to train) but got 44"
