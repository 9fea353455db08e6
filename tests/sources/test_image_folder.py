"""ImageFolder: labels from class folders or a list, exact pixels of real PNG and JPEG files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

from aioloader import DataLoader, ObjectNotFoundError, ShuffledSampler, SourceError, TreeCollator
from aioloader._protocols import BatchedDataset
from aioloader.sources import IMAGE_EXTENSIONS, ImageFolder, LabeledImage

pytestmark = pytest.mark.anyio


def pixels(seed: int, height: int = 6, width: int = 10) -> npt.NDArray[np.uint8]:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """cat/ (2 PNG, one nested), dog/ (1 PNG, 1 JPEG, 1 text file), empty/ (no image)."""
    for relative, seed in [("cat/b.png", 1), ("cat/deep/a.png", 2), ("dog/x.PNG", 3)]:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels(seed)).save(tmp_path / relative)
    Image.fromarray(pixels(4)).save(tmp_path / "dog" / "y.jpg", quality=90)
    (tmp_path / "dog" / "notes.txt").write_text("not an image")
    (tmp_path / "empty").mkdir()
    return tmp_path


def as_float(array: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    scaled: npt.NDArray[np.float32] = np.multiply(
        array.transpose(2, 0, 1), np.float32(1) / np.float32(255), dtype=np.float32
    )
    return scaled


def test_classes_are_sorted_sub_folders_and_files_are_found_recursively(folder: Path) -> None:
    images = ImageFolder(folder)
    assert images.classes == ("cat", "dog", "empty")
    relative = [(p.relative_to(folder).as_posix(), label) for p, label in images.samples]
    assert relative == [("cat/b.png", 0), ("cat/deep/a.png", 0), ("dog/x.PNG", 1), ("dog/y.jpg", 1)]
    assert len(images) == 4
    assert repr(images) == "ImageFolder(4 images, 3 classes)"
    assert images.paths[0] == folder / "cat" / "b.png"
    assert isinstance(images, BatchedDataset)
    assert ".png" in IMAGE_EXTENSIONS


def test_pattern_extensions_and_chosen_classes(folder: Path) -> None:
    shallow = ImageFolder(folder, pattern="*")
    assert [p.name for p in shallow.paths] == ["b.png", "x.PNG", "y.jpg"]
    jpeg_only = ImageFolder(folder, extensions=(".jpg",))
    assert [p.name for p in jpeg_only.paths] == ["y.jpg"]
    chosen = ImageFolder(folder, classes=["dog", "cat"])
    assert chosen.classes == ("dog", "cat")
    assert [(p.name, label) for p, label in chosen.samples] == [
        ("x.PNG", 0),
        ("y.jpg", 0),
        ("b.png", 1),
        ("a.png", 1),
    ]


async def test_png_pixels_are_exact_and_jpeg_matches_pillow(folder: Path) -> None:
    images = ImageFolder(folder)
    first = await images.get_sample(0)
    assert isinstance(first, LabeledImage)
    assert first.label == 0
    assert first.image.dtype == np.float32
    assert first.image.shape == (3, 6, 10)
    np.testing.assert_array_equal(first.image, as_float(pixels(1)))
    jpeg = await images.get_sample(3)
    with Image.open(folder / "dog" / "y.jpg") as opened:
        expected = np.asarray(opened.convert("RGB"))
    np.testing.assert_array_equal(jpeg.image, as_float(expected))


async def test_uint8_and_gray(folder: Path) -> None:
    raw = await ImageFolder(folder, to_float=False).get_sample(2)
    assert raw.image.dtype == np.uint8
    np.testing.assert_array_equal(raw.image, pixels(3))
    gray = await ImageFolder(folder, mode="L", to_float=False).get_sample(2)
    with Image.open(folder / "dog" / "x.PNG") as opened:
        expected = np.asarray(opened.convert("L"))[:, :, None]
    np.testing.assert_array_equal(gray.image, expected)


async def test_center_crop_keeps_the_aspect_and_stretch_does_not(tmp_path: Path) -> None:
    wide = np.zeros((4, 8, 3), np.uint8)
    wide[:, :, 0] = np.arange(8, dtype=np.uint8) * 30  # columns 0, 30, ..., 210
    (tmp_path / "c").mkdir()
    Image.fromarray(wide).save(tmp_path / "c" / "wide.png")
    cropped = await ImageFolder(tmp_path, size=(4, 4), to_float=False).get_sample(0)
    np.testing.assert_array_equal(cropped.image, wide[:, 2:6])  # scale 1: a pure crop
    halved = await ImageFolder(tmp_path, size=(2, 2), to_float=False).get_sample(0)
    assert halved.image.shape == (2, 2, 3)
    stretched = await ImageFolder(tmp_path, size=(4, 4), crop=None, to_float=False).get_sample(0)
    expected = np.asarray(Image.fromarray(wide).resize((4, 4), Image.Resampling.BILINEAR))
    np.testing.assert_array_equal(stretched.image, expected)


async def test_explicit_samples_with_relative_paths(folder: Path) -> None:
    images = ImageFolder(folder, samples=[("dog/x.PNG", 7), (folder / "cat" / "b.png", 2)])
    assert images.classes == ()
    first, second = await images.get_samples([0, 1])
    assert (first.label, second.label) == (7, 2)
    np.testing.assert_array_equal(first.image, as_float(pixels(3)))


async def test_decode_callback_gets_the_bytes_index_and_path(folder: Path) -> None:
    seen: list[tuple[int, int, Path]] = []

    def decode(data: bytes, index: int, path: Path) -> Any:
        seen.append((len(data), index, path))
        return np.full((2, 3), index, np.uint8)

    images = ImageFolder(folder, decode=decode, mode=None, to_float=False)
    sample = await images.get_sample(1)
    assert seen == [((folder / "cat/deep/a.png").stat().st_size, 1, folder / "cat/deep/a.png")]
    np.testing.assert_array_equal(sample.image, np.ones((2, 3, 1), np.uint8))


async def test_corrupt_truncated_and_missing_files_name_their_path(folder: Path) -> None:
    corrupt = folder / "cat" / "corrupt.png"
    corrupt.write_bytes(b"\x89PNG\r\n\x1a\n this is not a PNG")
    whole = (folder / "dog" / "y.jpg").read_bytes()
    truncated = folder / "cat" / "truncated.jpg"
    truncated.write_bytes(whole[: len(whole) // 2])
    images = ImageFolder(folder, samples=[(corrupt, 0), (truncated, 0), (folder / "gone.png", 0)])
    with pytest.raises(SourceError, match=r"^cannot decode image .*corrupt.png' \(sample 0\): "):
        await images.get_sample(0)
    with pytest.raises(SourceError, match=r"^cannot decode image .*truncated.jpg' \(sample 1\)"):
        await images.get_sample(1)
    with pytest.raises(ObjectNotFoundError, match=r"^image not found: .*gone\.png'$"):
        await images.get_sample(2)


async def test_a_decoder_value_error_is_a_value_error_naming_the_path(folder: Path) -> None:
    def decode(data: bytes, index: int, path: Path) -> Any:
        raise ValueError("unsupported")

    images = ImageFolder(folder, decode=decode)
    with pytest.raises(ValueError, match=r"^decoding image .*b.png' \(sample 0\) failed: unsup"):
        await images.get_sample(0)
    wrong = ImageFolder(folder, decode=lambda data, index, path: np.zeros(3), mode=None)
    with pytest.raises(ValueError, match=r"must decode to uint8 \[H, W\] or \[H, W, C\] but got"):
        await wrong.get_sample(0)


async def test_shuffled_batches_are_exact_on_every_backend(folder: Path) -> None:
    images = ImageFolder(folder, threads=2)
    sampler = ShuffledSampler(len(images), 2)
    loader = DataLoader(images, sampler, TreeCollator(), seed=3, workers=1)
    steps = []
    async for batch in loader:
        indices = sampler.indices(3, batch.epoch, batch.step).tolist()
        expected = [images.load(i) for i in indices]
        assert batch.data.image.shape == (2, 3, 6, 10)
        np.testing.assert_array_equal(batch.data.image, np.stack([e.image for e in expected]))
        assert batch.data.label.tolist() == [e.label for e in expected]
        steps.append(indices)
    assert sorted(i for indices in steps for i in indices) == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"crop": "top"}, ValueError, "crop must be 'center' or None but got 'top'"),
        ({"threads": 0}, ValueError, "threads must be an integer >= 1 but got 0"),
        ({"threads": True}, TypeError, "threads must be an integer >= 1 but got a bool (True)"),
        ({"size": (4,)}, ValueError, "size must be None or (height, width) of integers >= 1"),
        ({"size": (4, 0)}, ValueError, "size[1] (width) must be an integer >= 1 but got 0"),
        ({"size": (4.0, 4)}, TypeError, "size[0] (height) must be an integer >= 1 but got float"),
        ({"decode": "cv2"}, TypeError, "decode must be 'pillow' or callable but got 'cv2'"),
        ({"extensions": "png"}, TypeError, "extensions must be a sequence of str"),
        ({"extensions": ["png"]}, ValueError, "extensions[0] must be a str starting with '.'"),
        ({"classes": ["cow"]}, ValueError, "classes must name sub-folders of"),
        ({"classes": ["cat"], "samples": [("a", 0)]}, ValueError, "classes or samples, not both"),
        ({"samples": []}, ValueError, "samples must hold at least one (path, label)"),
        (
            {"samples": [("a", "cat")]},
            TypeError,
            "samples[0][1] (the label) must be an integer but got str ('cat')",
        ),
        (
            {"samples": [("a", False)]},
            TypeError,
            "samples[0][1] (the label) must be an integer but got a bool (False)",
        ),
        ({"pattern": "*.none"}, ValueError, "holds no file matching pattern '*.none'"),
    ],
)
def test_bad_arguments_are_named(
    folder: Path, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        ImageFolder(folder, **kwargs)
    assert message in str(info.value)


def test_a_root_without_class_folders(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must hold class sub-folders but has none"):
        ImageFolder(tmp_path)
    with pytest.raises(ValueError, match="root must be an existing folder but got None"):
        ImageFolder()


def test_validate_drops_empty_and_truncated_files_with_a_report(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("cat", "dog"):
        (tmp_path / name).mkdir()
    for index in range(3):
        Image.fromarray(pixels(index)).save(tmp_path / "cat" / f"{index}.jpg", quality=95)
    whole = (tmp_path / "cat" / "0.jpg").read_bytes()
    (tmp_path / "dog" / "truncated.jpg").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "dog" / "zero_bytes.jpg").write_bytes(b"")
    Image.fromarray(pixels(7)).save(tmp_path / "dog" / "good.png")
    assert len(ImageFolder(tmp_path)) == 6  # without validate every file counts
    with caplog.at_level("WARNING", logger="aioloader.samples"):
        checked = ImageFolder(tmp_path, validate=True, threads=2)
    assert len(checked) == 4
    assert [path.name for path in checked.paths] == ["0.jpg", "1.jpg", "2.jpg", "good.png"]
    assert [(path.name, reason.split(":")[0]) for path, reason in checked.invalid] == [
        ("truncated.jpg", "SourceError"),
        ("zero_bytes.jpg", "SourceError"),
    ]
    assert checked.invalid[0][1].endswith("(sample 4): OSError: cannot load this image")
    (record,) = caplog.records
    assert record.getMessage() == (
        "aioloader: ImageFolder dropped 2 of 6 files that do not decode: "
        f"{tmp_path / 'dog' / 'truncated.jpg'}, {tmp_path / 'dog' / 'zero_bytes.jpg'}"
    )
    assert ImageFolder(tmp_path, classes=["cat"], validate=True).invalid == ()


def test_validate_must_be_a_bool(folder: Path) -> None:
    with pytest.raises(TypeError, match="validate must be a bool but got str"):
        ImageFolder(folder, validate="yes")  # type: ignore[arg-type]
