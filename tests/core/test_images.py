"""ImageBatchCollator and ImageBatch (docs/contract.md, "Image batches" and "Memory")."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioloader._errors import BufferReleasedError
from aioloader.core._digest import digest_batch
from aioloader.core._image_ops import (
    BatchAugmentation,
    GainOffset,
)
from aioloader.core._images import ImageBatch, ImageBatchCollator, ImageSample
from aioloader.core._plan import BatchPlan
from aioloader.core._pool import BufferPool, PoolStatistics
from aioloader.core._rng import SampleRng, derive

F32 = np.float32


def plan_of(indices: list[int], seed: int = 0, epoch: int = 0, step: int = 0) -> BatchPlan:
    return BatchPlan(seed, 100 * epoch + step, epoch, step, np.array(indices, dtype=np.int64))


def image(c: int, h: int, w: int, start: float = 0.0) -> np.ndarray[Any, Any]:
    pixels: np.ndarray[Any, Any] = (np.arange(c * h * w, dtype=F32) + F32(start)).reshape(c, h, w)
    return pixels


def bits(array: np.ndarray[Any, Any]) -> bytes:
    return np.ascontiguousarray(array).tobytes()


def test_hand_worked_batch() -> None:
    samples = [
        ImageSample(image(1, 2, 3), (1, 2), 5),
        ImageSample(image(1, 2, 1, 10.0), [7], -3),
        ImageSample(image(1, 2, 2, 20.0)),
    ]
    collator = ImageBatchCollator(width_multiple=4, pad_value=-1.0)
    batch = collator(samples, plan_of([10, 11, 12], seed=1, epoch=2, step=3))
    p = -1.0
    assert batch.images.dtype == F32
    assert batch.images.tolist() == [
        [[[0.0, 1.0, 2.0, p], [3.0, 4.0, 5.0, p]]],
        [[[10.0, p, p, p], [11.0, p, p, p]]],
        [[[20.0, 21.0, p, p], [22.0, 23.0, p, p]]],
    ]
    for name, expected in [
        ("widths", [3, 1, 2]),
        ("targets", [1, 2, 7]),
        ("target_lengths", [2, 1, 0]),
        ("labels", [5, -3, 0]),
        ("indices", [10, 11, 12]),
    ]:
        value = getattr(batch, name)
        assert (name, value.dtype, value.tolist()) == (name, np.int32, expected)
    assert (batch.global_step, batch.epoch, batch.step, len(batch)) == (203, 2, 3, 3)


def test_channels_are_planar_and_padded_per_row() -> None:
    samples = [ImageSample(image(2, 1, 2)), ImageSample(image(2, 1, 3, 10.0))]
    batch = ImageBatchCollator(pad_value=9.0)(samples, plan_of([0, 1]))
    assert batch.images.tolist() == [
        [[[0.0, 1.0, 9.0]], [[2.0, 3.0, 9.0]]],
        [[[10.0, 11.0, 12.0]], [[13.0, 14.0, 15.0]]],
    ]


@pytest.mark.parametrize(
    ("widths", "multiple", "padded"),
    [([7, 3], 1, 7), ([7, 3], 5, 10), ([8, 8], 4, 8), ([1], 3, 3), ([9, 2], 9, 9)],
)
def test_padded_width_is_rounded_up(widths: list[int], multiple: int, padded: int) -> None:
    samples = [ImageSample(image(1, 1, w)) for w in widths]
    batch = ImageBatchCollator(width_multiple=multiple)(samples, plan_of(list(range(len(widths)))))
    assert batch.images.shape == (len(widths), 1, 1, padded)


def test_per_sample_augmentation_sees_a_contiguous_copy_and_its_slot_rng() -> None:
    seen: list[tuple[tuple[int, ...], bool]] = []

    def augment(scratch: np.ndarray[Any, Any], rng: SampleRng) -> None:
        seen.append((scratch.shape, scratch.flags.c_contiguous))
        scratch += F32(rng.next_int(1000))

    samples = [ImageSample(image(1, 2, 2)), ImageSample(image(1, 2, 1))]
    batch = ImageBatchCollator(2, pad_value=-5.0, augment=augment)(
        samples, plan_of([4, 9], seed=42, epoch=1, step=6)
    )
    a = SampleRng(derive(42, 1, 6, 0, 1)).next_int(1000)
    b = SampleRng(derive(42, 1, 6, 1, 1)).next_int(1000)
    assert seen == [((1, 2, 2), True), ((1, 2, 1), True)]
    assert batch.images.tolist() == [
        [[[0.0 + a, 1.0 + a], [2.0 + a, 3.0 + a]]],
        [[[0.0 + b, -5.0], [1.0 + b, -5.0]]],
    ]
    assert samples[0].image.tolist() == [[[0.0, 1.0], [2.0, 3.0]]]  # inputs untouched


class _PerSampleOnly:
    def __init__(self, inner: GainOffset) -> None:
        self.inner = inner

    def __call__(self, scratch: np.ndarray[Any, Any], rng: SampleRng) -> None:
        self.inner(scratch, rng)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**64 - 1),
    step=st.integers(0, 1000),
    widths=st.lists(st.integers(1, 19), min_size=1, max_size=9),
    channels=st.integers(1, 3),
    multiple=st.integers(1, 8),
    pad=st.sampled_from([0.0, -1.0, 0.5]),
    stds=st.tuples(st.floats(0, 3), st.floats(0, 3)),
)
def test_vectorised_gain_offset_is_bit_identical_to_per_sample(
    seed: int,
    step: int,
    widths: list[int],
    channels: int,
    multiple: int,
    pad: float,
    stds: tuple[float, float],
) -> None:
    rng = np.random.default_rng(step)
    samples = [
        ImageSample((rng.standard_normal((channels, 3, w)) * 100).astype(F32)) for w in widths
    ]
    plan = plan_of(list(range(len(widths))), seed=seed, epoch=3, step=step)
    augment = GainOffset(*stds)
    assert isinstance(augment, BatchAugmentation)
    assert not isinstance(_PerSampleOnly(augment), BatchAugmentation)
    fast = ImageBatchCollator(multiple, pad, augment)(samples, plan)
    slow = ImageBatchCollator(multiple, pad, _PerSampleOnly(augment))(samples, plan)
    assert bits(fast.images) == bits(slow.images)
    for i, w in enumerate(widths):
        assert (fast.images[i, :, :, w:] == F32(pad)).all()


def test_vectorised_path_draws_for_every_slot_with_stream_1() -> None:
    samples = [ImageSample(np.ones((1, 1, 2), F32)), ImageSample(np.ones((1, 1, 1), F32))]
    batch = ImageBatchCollator(pad_value=7.0, augment=GainOffset(1.0, 1.0))(
        samples, plan_of([0, 0], seed=5, epoch=0, step=2)
    )
    expected = []
    for slot in range(2):
        rng = SampleRng(derive(5, 0, 2, slot, 1))
        gain = F32(1.0) + rng.next_normal()
        offset = rng.next_normal()
        expected.append(float(F32(F32(1.0) * gain) + offset))
    assert batch.images.tolist() == [
        [[[expected[0], expected[0]]]],
        [[[expected[1], 7.0]]],
    ]


def test_mixed_channels_or_heights_name_both_indices_and_shapes() -> None:
    collator = ImageBatchCollator()
    with pytest.raises(ValueError, match="must share C and H") as info:
        collator([ImageSample(image(1, 32, 5)), ImageSample(image(3, 32, 4))], plan_of([10, 11]))
    assert str(info.value) == (
        "every image of one batch must share C and H but dataset index 10 has shape (1, 32, 5) "
        "and dataset index 11 has shape (3, 32, 4)"
    )
    with pytest.raises(ValueError, match=r"index 7 has shape \(1, 2, 1\) and dataset index 8"):
        collator([ImageSample(image(1, 2, 1)), ImageSample(image(1, 3, 1))], plan_of([7, 8]))


@pytest.mark.parametrize(
    ("sample", "index", "error", "message"),
    [
        (
            ImageSample(image(1, 1, 1), label=2**31),
            0,
            ValueError,
            "samples[1].label (dataset index 0) must fit int32 in [-2^31, 2^31) but got 2147483648",
        ),
        (
            ImageSample(image(1, 1, 1), label=True),
            0,
            TypeError,
            "samples[1].label (dataset index 0) must be an int32 but got bool (True)",
        ),
        (
            ImageSample(image(1, 1, 1), target=(1, -(2**31) - 1)),
            3,
            ValueError,
            "samples[1].target (dataset index 3) must hold int32 values but holds -2147483649",
        ),
        (
            ImageSample(image(1, 1, 1), target=(1.5,)),  # type: ignore[arg-type]
            3,
            TypeError,
            "samples[1].target (dataset index 3) must hold integers but got dtype float64",
        ),
        (
            ImageSample(image(1, 1, 1), target=np.array([2**31], np.uint32)),
            3,
            ValueError,
            "samples[1].target (dataset index 3) must hold int32 values but holds 2147483648",
        ),
        (
            ImageSample(image(1, 1, 1), target=[[1]]),  # type: ignore[list-item]
            3,
            ValueError,
            "samples[1].target (dataset index 3) must be a 1-D sequence of int32 but got shape "
            "(1, 1)",
        ),
        (
            ImageSample(image(1, 1, 1).astype(np.float64)),
            3,
            TypeError,
            "samples[1].image (dataset index 3) must have dtype float32 but got float64",
        ),
        (
            ImageSample(np.zeros((1, 1), F32)),
            3,
            ValueError,
            "samples[1].image (dataset index 3) must be 3-D [C, H, W] but got shape (1, 1)",
        ),
        (
            ImageSample(np.zeros((1, 1, 0), F32)),
            3,
            ValueError,
            "image width must be >= 1 but dataset index 3 has shape (1, 1, 0)",
        ),
        (
            ImageSample([[[1.0]]]),  # type: ignore[arg-type]
            3,
            TypeError,
            "samples[1].image (dataset index 3) must be a numpy float32 array but got list",
        ),
        (
            ImageSample(image(1, 1, 1)),
            2**31,
            ValueError,
            "dataset index must fit int32 as an index in [0, 2^31) but got 2147483648 at slot 1",
        ),
    ],
)
def test_bad_samples_are_named(
    sample: ImageSample, index: int, error: type[Exception], message: str
) -> None:
    pool = BufferPool()
    collator = ImageBatchCollator(pool=pool)
    with pytest.raises(error) as info:
        collator([ImageSample(image(1, 1, 1)), sample], plan_of([0, index]))
    assert str(info.value) == message
    assert pool.statistics().buffers_out == 0


def test_bad_collator_arguments_are_named() -> None:
    with pytest.raises(ValueError, match=r"width_multiple must be an integer in \[1, 2\^31\)"):
        ImageBatchCollator(width_multiple=0)
    with pytest.raises(TypeError, match="width_multiple must be an integer but got float"):
        ImageBatchCollator(width_multiple=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"pad_value must be finite in float32 but got 1e\+39"):
        ImageBatchCollator(pad_value=1e39)
    with pytest.raises(TypeError, match="pad_value must be a real number but got str"):
        ImageBatchCollator(pad_value="0")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="augment must be callable or None but got int"):
        ImageBatchCollator(augment=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pool must be a BufferPool or None but got dict"):
        ImageBatchCollator(pool={})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"gain_std must be finite and >= 0 but got -1\.0"):
        GainOffset(-1.0, 0.0)
    collator = ImageBatchCollator()
    with pytest.raises(ValueError, match="samples must hold at least one sample but got 0"):
        collator([], plan_of([]))
    with pytest.raises(ValueError, match=r"plan.indices must hold one index per sample \(1\)"):
        collator([ImageSample(image(1, 1, 1))], plan_of([0, 1]))
    with pytest.raises(TypeError, match=r"samples\[0\] must be an ImageSample but got int"):
        collator([3], plan_of([0]))  # type: ignore[list-item]


def test_release_returns_buffers_and_blocks_every_field() -> None:
    pool = BufferPool()
    collator = ImageBatchCollator(pool=pool)
    samples = [ImageSample(image(1, 2, 3), (1,), 1)]
    batch = collator(samples, plan_of([0]))
    assert pool.statistics() == PoolStatistics(0, 2, 0, 0, 2)
    state = batch._state
    with batch:
        pass
    assert pool.statistics() == PoolStatistics(0, 2, 128, 2, 0)
    assert repr(batch) == "ImageBatch(<released>)"
    for name in ("images", "widths", "targets", "target_lengths", "labels", "indices"):
        with pytest.raises(BufferReleasedError, match="ImageBatch was released"):
            getattr(batch, name)
    # The step fields hold no pooled memory: they stay readable after release.
    assert (batch.global_step, batch.epoch, batch.step) == (0, 0, 0)
    with pytest.raises(BufferReleasedError):
        digest_batch(batch)
    batch.release()
    again = collator(samples, plan_of([1]))
    assert again._state is state
    assert pool.statistics() == PoolStatistics(2, 2, 0, 0, 2)
    with pytest.raises(BufferReleasedError):
        _ = batch.indices


def test_digest_follows_content() -> None:
    samples = [ImageSample(image(1, 2, 3)), ImageSample(image(1, 2, 2))]
    collator = ImageBatchCollator(4)
    first = digest_batch(collator(samples, plan_of([0, 1])))
    assert digest_batch(collator(samples, plan_of([0, 1]))) == first
    assert digest_batch(collator(samples, plan_of([0, 2]))) != first
    manual = ImageBatch(
        images=collator(samples, plan_of([0, 1])).images.copy(),
        widths=np.array([3, 2], np.int32),
        targets=np.zeros(0, np.int32),
        target_lengths=np.zeros(2, np.int32),
        labels=np.zeros(2, np.int32),
        indices=np.array([0, 1], np.int32),
        global_step=0,
    )
    assert digest_batch(manual) == first
    manual.release()
    assert manual.released


def test_augmentation_failure_gives_buffers_back() -> None:
    pool = BufferPool()

    def broken(scratch: np.ndarray[Any, Any], rng: SampleRng) -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        ImageBatchCollator(augment=broken, pool=pool)([ImageSample(image(1, 1, 1))], plan_of([0]))
    assert pool.statistics().buffers_out == 0


def test_threads_build_the_same_batches() -> None:
    rng = np.random.default_rng(7)
    data = [ImageSample(rng.random((1, 4, int(w)), dtype=F32)) for w in rng.integers(1, 30, 64)]
    plans = [plan_of(list(range(s * 8, s * 8 + 8)), seed=9, step=s) for s in range(8)]
    collator = ImageBatchCollator(4, -1.0, GainOffset(0.2, 0.1))
    expected = [digest_batch(collator(data[s * 8 : s * 8 + 8], plans[s])) for s in range(8)]
    results: dict[tuple[int, int], str] = {}

    def work(worker: int) -> None:
        for round_ in range(5):
            for s in range(8):
                with collator(data[s * 8 : s * 8 + 8], plans[s]) as batch:
                    results[(worker, round_ * 8 + s)] = digest_batch(batch)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 * 40
    assert all(digest == expected[k % 8] for (_, k), digest in results.items())
