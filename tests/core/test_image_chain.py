"""JpegCropResize and crop_resize: compiled kernel and numpy reference bit for bit, against
Pillow's decode (exact) and bilinear sampling (within 1), draws and digests pinned."""

from __future__ import annotations

import io
import pickle
import sys
import threading
from typing import Any

import numpy as np
import pytest
from PIL import Image

from aioloader import JpegCropResize
from aioloader.core import SampleRng, crop_resize
from aioloader.core import _image_chain as chain_module
from aioloader.core._image_chain import Q, crop_resize_reference
from aioloader.kernels import _selection, failure, use_kernels

U8 = np.uint8


def jpeg(height: int, width: int, seed: int = 0, mode: str = "RGB", quality: int = 90) -> bytes:
    """A JPEG of smooth gradients plus noise (Pillow's encoder, 4:2:0 for RGB)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // max(width, 1), y * 255 // max(height, 1), (x + y) % 256], -1)
    noise = rng.integers(-40, 41, base.shape)
    pixels = np.clip(base + noise, 0, 255).astype(U8)
    image = Image.fromarray(pixels)
    if mode != "RGB":
        image = image.convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def compiled_kernel() -> Any:
    with use_kernels("numba"):
        kernel = chain_module._kernel()
    assert kernel is not None, failure()
    return kernel


def random_case(rng: np.random.Generator) -> tuple[Any, ...]:
    """An image, a box in the coordinates of a possibly larger 'file', an output size."""
    n_rows, n_cols = (int(v) for v in rng.integers(1, 80, 2))
    channels = int(rng.choice([1, 3, 4]))
    image = rng.integers(0, 256, (n_rows, n_cols, channels), dtype=U8)
    scale = int(rng.choice([1, 1, 2, 4, 8]))
    full = (
        n_rows * scale - int(rng.integers(0, scale)),
        n_cols * scale - int(rng.integers(0, scale)),
    )
    height, width = int(rng.integers(1, full[0] + 1)), int(rng.integers(1, full[1] + 1))
    top, left = (
        int(rng.integers(0, full[0] - height + 1)),
        int(rng.integers(0, full[1] - width + 1)),
    )
    size = (int(rng.integers(1, 120)), int(rng.integers(1, 120)))
    return image, (top, left, height, width), full, size, bool(rng.integers(2))


# -- the kernel is the reference, bit for bit ---------------------------------------------


def test_kernel_and_reference_agree_bit_for_bit_on_random_images_boxes_and_sizes() -> None:
    kernel = compiled_kernel()
    rng = np.random.default_rng(34)
    for _ in range(400):
        image, box, full, size, flip = random_case(rng)
        out = np.empty((*size, image.shape[2]), U8)
        kernel(image, *box, *full, flip, out)
        expected = crop_resize_reference(image, box, full, size, flip)
        assert out.tobytes() == expected.tobytes(), (image.shape, box, full, size, flip)


def test_kernel_and_reference_agree_at_the_largest_coordinates() -> None:
    kernel = compiled_kernel()
    image = np.random.default_rng(1).integers(0, 256, (9, 700, 3), dtype=U8)
    box, full, size = (65000, 60000, 535, 5535), (65535, 65535), (3, 16384)
    out = np.empty((*size, 3), U8)
    kernel(image, *box, *full, True, out)
    assert out.tobytes() == crop_resize_reference(image, box, full, size, True).tobytes()


def test_the_kernel_releases_the_gil_and_is_cached_on_disk() -> None:
    kernel = compiled_kernel()
    assert kernel.targetoptions["nogil"] is True
    assert kernel._cache.__class__.__name__ == "FunctionCache"  # numba's on-disk cache


def test_numpy_and_numba_choices_give_the_same_chain_output() -> None:
    chain = JpegCropResize(48, (20, 40), flip=True)
    data = jpeg(50, 70)
    with use_kernels("numpy"):
        reference = [chain(data, SampleRng(key)).tobytes() for key in range(16)]
    with use_kernels("numba"):
        compiled = [chain(data, SampleRng(key)).tobytes() for key in range(16)]
    assert reference == compiled


# -- exact values of the formula -----------------------------------------------------------


def test_the_whole_image_at_its_own_size_is_copied_exactly_and_flip_mirrors_it() -> None:
    image = np.random.default_rng(2).integers(0, 256, (13, 17, 3), dtype=U8)
    for kernels in ("numpy", "numba"):
        with use_kernels(kernels):
            assert crop_resize(image, (13, 17)).tobytes() == image.tobytes()
            flipped = crop_resize(image, (13, 17), flip=True)
            assert flipped.tobytes() == image[:, ::-1].tobytes()


def test_halving_takes_the_mean_of_each_2x2_block_rounded_half_up() -> None:
    image = np.random.default_rng(3).integers(0, 256, (10, 14, 3), dtype=U8)
    blocks = image.astype(np.int64).reshape(5, 2, 7, 2, 3).sum(axis=(1, 3))
    expected = ((2 * blocks + 4) // 8).astype(U8)  # floor(sum / 4 + 1/2)
    for kernels in ("numpy", "numba"):
        with use_kernels(kernels):
            assert crop_resize(image, (5, 7)).tobytes() == expected.tobytes()


def test_a_constant_image_stays_constant_at_any_box_and_size() -> None:
    image = np.full((31, 23, 3), 201, U8)
    rng = np.random.default_rng(4)
    for _ in range(50):
        h, w = int(rng.integers(1, 32)), int(rng.integers(1, 24))
        box = (int(rng.integers(0, 32 - h)), int(rng.integers(0, 24 - w)), h, w)
        size = (int(rng.integers(1, 60)), int(rng.integers(1, 60)))
        assert set(crop_resize(image, size, box).ravel().tolist()) == {201}


def test_the_fraction_bits_are_the_same_in_kernel_and_reference() -> None:
    from aioloader.kernels import _image_chain as _image_chain_kernels

    assert Q == _image_chain_kernels.Q == 11


# -- against Pillow --------------------------------------------------------------------------


def pillow_sample(
    image: Any, box: tuple[int, int, int, int], full: tuple[int, int], size: tuple[int, int]
) -> Any:
    """Pillow's plain bilinear sampling of the same box (affine map, floating point)."""
    top, left, height, width = box
    sy, sx = image.shape[0] / full[0], image.shape[1] / full[1]
    data = (width * sx / size[1], 0, left * sx, 0, height * sy / size[0], top * sy)
    pil = Image.fromarray(image).transform(
        (size[1], size[0]), Image.Transform.AFFINE, data, resample=Image.Resampling.BILINEAR
    )
    return np.asarray(pil)


def test_within_one_of_pillows_bilinear_affine_sampling() -> None:
    rng = np.random.default_rng(5)
    worst = 0
    for _ in range(200):
        image, box, full, size, flip = random_case(rng)
        image = np.ascontiguousarray(image[:, :, :3]) if image.shape[2] != 1 else image[:, :, 0]
        ours = crop_resize_reference(np.atleast_3d(image), box, full, size, flip)
        theirs = np.atleast_3d(pillow_sample(image, box, full, size))
        if flip:
            theirs = theirs[:, ::-1]
        worst = max(worst, int(np.abs(ours.astype(int) - theirs).max()))
    assert worst == 1


def test_within_one_of_pillows_bilinear_resize_when_enlarging() -> None:
    rng = np.random.default_rng(6)
    for _ in range(100):
        image = rng.integers(0, 256, (40, 50, 3), dtype=U8)
        h, w = int(rng.integers(1, 41)), int(rng.integers(1, 51))
        top, left = int(rng.integers(0, 41 - h)), int(rng.integers(0, 51 - w))
        size = (int(rng.integers(h, 90)), int(rng.integers(w, 90)))
        ours = crop_resize(image, size, (top, left, h, w))
        theirs = Image.fromarray(image).resize(
            (size[1], size[0]), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h)
        )
        assert int(np.abs(ours.astype(int) - np.asarray(theirs)).max()) <= 1


def test_pillows_resize_differs_when_shrinking_it_widens_its_filter() -> None:
    image = np.random.default_rng(7).integers(0, 256, (64, 64, 3), dtype=U8)
    ours = crop_resize(image, 32)
    theirs = np.asarray(Image.fromarray(image).resize((32, 32), Image.Resampling.BILINEAR))
    assert int(np.abs(ours.astype(int) - theirs).max()) > 16


@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("shape", [(375, 500), (33, 47), (1, 1), (16, 9)])
def test_the_decode_is_pillows_decode_exactly(mode: str, shape: tuple[int, int]) -> None:
    data = jpeg(*shape, mode=mode)
    ours, full = JpegCropResize().decode(data)
    theirs = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    assert full == shape
    assert ours.tobytes() == theirs.tobytes()


@pytest.mark.parametrize("scale", [2, 4, 8])
def test_a_reduced_dct_scale_is_pillows_draft_decode_exactly(scale: int) -> None:
    data = jpeg(375, 500)
    ours, full = JpegCropResize(dct_scale=scale).decode(data)
    draft = Image.open(io.BytesIO(data))
    draft.draft("RGB", (500 // scale, 375 // scale))
    theirs = np.asarray(draft.convert("RGB"))
    assert full == (375, 500)
    assert ours.shape == (-(-375 // scale), -(-500 // scale), 3) == theirs.shape
    assert ours.tobytes() == theirs.tobytes()


@pytest.mark.parametrize("scale", [1, 2])
def test_the_whole_chain_is_within_one_of_the_same_chain_in_pillow(scale: int) -> None:
    data = jpeg(120, 160)
    chain = JpegCropResize(size=(40, 56), crop=(60, 100), flip=True, dct_scale=scale)
    for key in range(20):
        ours = chain(data, SampleRng(key))
        top, left, height, width, flipped = chain.draw((120, 160), SampleRng(key))
        decoded = Image.open(io.BytesIO(data))
        decoded.draft("RGB", (160 // scale, 120 // scale))
        pixels = np.asarray(decoded.convert("RGB"))
        theirs = pillow_sample(pixels, (top, left, height, width), (120, 160), (40, 56))
        if flipped:
            theirs = theirs[:, ::-1]
        assert int(np.abs(ours.astype(int) - theirs).max()) <= 1


# -- draws: the batch stays a pure function of (seed, step) -------------------------------


def test_draws_are_side_top_left_then_one_flip_bit_in_that_order() -> None:
    data = jpeg(90, 130)
    chain = JpegCropResize(size=32, crop=(40, 70), flip=True)
    decoded, _ = chain.decode(data)
    for key in (0, 1, 2**64 - 1, 0x1234):
        expected_rng = SampleRng(key)
        side = min(40 + expected_rng.next_int(31), 90, 130)
        top = expected_rng.next_int(90 - side + 1)
        left = expected_rng.next_int(130 - side + 1)
        flipped = expected_rng.next_u64() >> 63 == 1
        rng = SampleRng(key)
        out = chain(data, rng)
        assert rng.state == expected_rng.state
        expected = crop_resize(decoded, 32, (top, left, side, side), flip=flipped)
        assert out.tobytes() == expected.tobytes()


def test_draws_are_pinned() -> None:
    chain = JpegCropResize(size=224, crop=(300, 360), flip=True)
    draws = [chain.draw((375, 500), SampleRng(key)) for key in range(4)]
    assert draws == [
        (9, 3, 353, 353, True),
        (31, 162, 334, 334, False),
        (29, 98, 336, 336, True),
        (49, 119, 306, 306, False),
    ]


def test_a_crop_larger_than_the_image_takes_its_shorter_side() -> None:
    chain = JpegCropResize(size=8, crop=(300, 360))
    assert chain.draw((40, 60), SampleRng(9)) == (0, 5, 40, 40, False)


def test_without_crop_or_flip_no_rng_is_needed_and_none_is_drawn() -> None:
    data = jpeg(30, 40)
    chain = JpegCropResize(size=(15, 20))
    decoded, _ = chain.decode(data)
    rng = SampleRng(5)
    assert (
        chain(data, rng).tobytes()
        == chain(data).tobytes()
        == crop_resize(decoded, (15, 20)).tobytes()
    )
    assert rng.state == 5


def test_the_same_key_gives_the_same_bits_and_keys_differ() -> None:
    data = jpeg(375, 500)
    chain = JpegCropResize(size=64, crop=(300, 360), flip=True)
    first = [chain(data, SampleRng(key)).tobytes() for key in range(8)]
    again = [chain(data, SampleRng(key)).tobytes() for key in range(8)]
    assert first == again
    assert len(set(first)) == 8


def test_threads_give_the_serial_bits() -> None:
    data = [jpeg(60 + k, 80, seed=k) for k in range(8)]
    chain = JpegCropResize(size=32, crop=(30, 50), flip=True)
    serial = [chain(d, SampleRng(k)).tobytes() for k, d in enumerate(data)]
    results: list[bytes] = [b""] * 8

    def work(k: int) -> None:
        results[k] = chain(data[k], SampleRng(k)).tobytes()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == serial


def test_data_may_be_bytes_bytearray_memoryview_or_a_uint8_array() -> None:
    data = jpeg(20, 30)
    chain = JpegCropResize(size=10)
    expected = chain(data).tobytes()
    for form in (bytearray(data), memoryview(data), np.frombuffer(data, U8)):
        assert chain(form).tobytes() == expected


# -- digest ------------------------------------------------------------------------------


def test_the_digest_is_pinned_and_names_every_option_that_changes_pixels() -> None:
    chain = JpegCropResize(size=224, crop=(300, 360), flip=True)
    assert chain.digest == "fd934391a6426bbc791eebfc343908dc57f51ebf431a4f66a06f475002adaedc"
    assert chain.fingerprint_fields() == {
        "version": 1,
        "fraction_bits": 11,
        "size": [224, 224],
        "crop": [300, 360],
        "flip": True,
        "dct_scale": 1,
        "fast_dct": False,
        "fast_upsample": False,
    }
    others = [
        JpegCropResize(size=224, crop=(300, 360), flip=True, dct_scale=2),
        JpegCropResize(size=224, crop=(300, 360), flip=True, fast_dct=True),
        JpegCropResize(size=224, crop=(300, 360), flip=True, fast_upsample=True),
        JpegCropResize(size=(224, 225), crop=(300, 360), flip=True),
        JpegCropResize(size=224, crop=(300, 361), flip=True),
        JpegCropResize(size=224, crop=None, flip=True),
        JpegCropResize(size=224, crop=(300, 360), flip=False),
    ]
    assert len({chain.digest} | {other.digest for other in others}) == 8


def test_equal_options_give_equal_chains_digests_and_pickles() -> None:
    chain = JpegCropResize(size=(224, 224), crop=[300, 300])  # type: ignore[arg-type]
    same = JpegCropResize(size=224, crop=300)
    assert chain == same
    assert chain.digest == same.digest
    assert (chain.size, chain.crop) == ((224, 224), (300, 300))
    copy = pickle.loads(pickle.dumps(chain))
    assert copy == chain
    assert copy.digest == chain.digest


def test_a_reduced_dct_scale_gives_different_pixels() -> None:
    data = jpeg(375, 500)
    full = JpegCropResize(size=64, crop=(300, 360))(data, SampleRng(1))
    reduced = JpegCropResize(size=64, crop=(300, 360), dct_scale=2)(data, SampleRng(1))
    assert full.shape == reduced.shape == (64, 64, 3)
    assert full.tobytes() != reduced.tobytes()
    assert int(np.abs(full.astype(int) - reduced).max()) < 128


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"size": 0}, ValueError, r"size must be an integer in \[1, 16384\] but got 0"),
        ({"size": (3, 2, 1)}, TypeError, r"size must be an int or \(height, width\) but got"),
        ({"crop": (360, 300)}, ValueError, r"crop must be \(low, high\) with low <= high but"),
        ({"crop": 0}, ValueError, r"crop must be an integer in \[1, 65535\] but got 0"),
        ({"dct_scale": 3}, ValueError, "dct_scale must be 1, 2, 4 or 8 but got 3"),
        ({"dct_scale": True}, ValueError, "dct_scale must be 1, 2, 4 or 8 but got True"),
        ({"flip": 1}, TypeError, "flip must be a bool but got int"),
        ({"fast_dct": "yes"}, TypeError, "fast_dct must be a bool but got str"),
    ],
)
def test_bad_options_are_named(options: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        JpegCropResize(**options)


def test_bad_calls_are_named() -> None:
    chain = JpegCropResize(size=8, crop=(4, 6))
    with pytest.raises(TypeError, match=r"data must be the JPEG's bytes .* but got str"):
        chain("image.jpg", SampleRng(0))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="rng must be a SampleRng when crop or flip is set"):
        chain(jpeg(8, 8))
    with pytest.raises(
        ValueError, match="data must be a JPEG that libjpeg-turbo decodes but got 5"
    ):
        chain(b"hello", SampleRng(0))


def test_crop_resize_checks_its_arguments() -> None:
    image = np.zeros((4, 5, 3), U8)
    with pytest.raises(TypeError, match=r"image must be a uint8 array \[H, W, C\] but got float32"):
        crop_resize(image.astype(np.float32), 2)
    with pytest.raises(ValueError, match=r"box must be integers .* inside the 4x5 image"):
        crop_resize(image, 2, (1, 1, 4, 2))
    with pytest.raises(TypeError, match="box must be a tuple"):
        crop_resize(image, 2, [0, 0, 1, 1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="flip must be a bool"):
        crop_resize(image, 2, flip=0)  # type: ignore[arg-type]


def test_without_simplejpeg_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "simplejpeg", None)
    with pytest.raises(ImportError, match=r"needs simplejpeg .* pip install 'aioloader\[images\]'"):
        JpegCropResize()(jpeg(8, 8))


def test_decode_returns_new_arrays_and_the_chain_reuses_its_scratch_safely() -> None:
    small, large = jpeg(20, 30, seed=1), jpeg(70, 90, seed=2)
    chain = JpegCropResize(size=16)
    first, _ = chain.decode(large)
    second, _ = chain.decode(large)
    assert not np.shares_memory(first, second)
    expected = {data: crop_resize(chain.decode(data)[0], 16).tobytes() for data in (small, large)}
    for data in (large, small, large, small):
        assert chain(data).tobytes() == expected[data]


def test_the_chain_runs_compiled_exactly_when_the_batch_kernels_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaded = compiled_kernel()
    monkeypatch.setattr(_selection, "compiled", lambda: None)  # not loaded, or on a loop
    assert chain_module._kernel() is None
    monkeypatch.setattr(_selection, "compiled", lambda: object())
    assert chain_module._kernel() is loaded
