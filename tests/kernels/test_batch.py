"""The compiled kernels against the numpy reference, bit for bit, on seeded random inputs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from aioloader.core import (
    BatchPlan,
    GainOffset,
    ImageBatchCollator,
    ImageSample,
    PackCollator,
    PackedSampler,
    PadCollator,
    gray8_to_planar,
    keyed_permutation_array,
    plan_batch,
    rgb8_to_planar,
)
from aioloader.core._packing import first_fit_decreasing, pack_lengths
from aioloader.core._rng import SampleRng
from aioloader.datasets import line_images
from aioloader.kernels import _batch as _kernels
from aioloader.kernels import _selection as _backend

FIELDS = {
    "image": ("images", "widths", "targets", "target_lengths", "labels", "indices"),
    "pad": ("tokens", "lengths", "attention_mask", "indices"),
    "pack": ("tokens", "position_ids", "segment_ids", "cu_seqlens", "indices", "causal_mask"),
}


def arrays_of(batch: Any, kind: str) -> dict[str, Any]:
    with batch:
        return {name: _snapshot(getattr(batch, name)) for name in FIELDS[kind]}


def _snapshot(value: Any) -> Any:
    if value is None:
        return None
    array = np.asarray(value)
    return (array.dtype.str, array.shape, array.tobytes())


def both(call: Callable[[], Any]) -> tuple[Any, Any]:
    """``call()`` with the compiled kernels, then with numpy; outcomes (value or error)."""
    outcomes = []
    for name in ("numba", "numpy"):
        with _backend.use_kernels(name):
            try:
                outcomes.append(("ok", call()))
            except Exception as error:  # the same error on both sides is part of the contract
                outcomes.append(("error", (type(error), str(error))))
    return outcomes[0], outcomes[1]


def test_compiled_kernels_load() -> None:
    assert _kernels.HEADER is not None
    assert _backend.load() is _kernels
    assert _backend.failure() is None
    assert not isinstance(_kernels.fill_images, _kernels.Lazy)
    assert _backend.active() == "numba"
    with _backend.use_kernels("numpy"):
        assert _backend.active() == "numpy"
        assert _backend.compiled() is None


def test_bad_choice_names_the_argument() -> None:
    match = "kernels must be 'auto', 'numba' or 'numpy' but got 'gpu'"
    with pytest.raises(ValueError, match=match), _backend.use_kernels("gpu"):
        pass


def test_environment_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOLOADER_KERNELS", "numpy")
    assert _backend.compiled() is None
    monkeypatch.setenv("AIOLOADER_KERNELS", "fast")
    with pytest.raises(ValueError, match="AIOLOADER_KERNELS must be 'auto', 'numba' or"):
        _backend.compiled()


# -- random numbers ---------------------------------------------------------------------
def test_next_normal_matches_sample_rng() -> None:
    keys = np.random.default_rng(1).integers(0, 2**64, size=64, dtype=np.uint64)
    keys[:3] = [0, 2**64 - 1, 0x9E3779B97F4A7C15]
    out = np.zeros((keys.shape[0], 1, 1, 1), np.float32)
    one = np.ones((1, 1, 1), np.float32)  # alive for the call: the kernel reads it by id
    ids = np.full(keys.shape[0], id(one), np.int64)
    widths = np.ones(keys.shape[0], np.int64)
    _kernels.fill_images(
        ids,
        _kernels.HEADER,  # type: ignore[arg-type]
        widths,
        out,
        np.float32(0),
        1,
        keys,
        np.float32(1),
        np.float32(1),
    )
    for lane, key in enumerate(keys.tolist()):
        rng = SampleRng(key)
        gain = np.float32(1) + np.float32(1) * rng.next_normal()
        expected = np.float32(np.float32(1) * gain) + np.float32(1) * rng.next_normal()
        assert out[lane, 0, 0, 0].tobytes() == np.float32(expected).tobytes()


# -- images ---------------------------------------------------------------------------
class Doubling:
    """A per-sample augmentation without a batch form (the reference loop runs)."""

    def __call__(self, scratch: np.ndarray[Any, Any], rng: SampleRng) -> None:
        scratch *= np.float32(2) + rng.next_single()


class Negating:
    """A batch augmentation other than GainOffset (kernels copy and pad around it)."""

    def __call__(self, scratch: np.ndarray[Any, Any], rng: SampleRng) -> None:
        np.negative(scratch, out=scratch)

    def augment_batch(self, images: Any, widths: Any, rng: Any) -> None:
        np.negative(images, out=images)


def random_images(generator: np.random.Generator, n: int) -> list[ImageSample]:
    c, h = int(generator.integers(1, 4)), int(generator.integers(1, 6))
    samples = []
    for _ in range(n):
        w = int(generator.integers(1, 12))
        kind = int(generator.integers(0, 4))
        if kind == 0:  # contiguous
            image = generator.standard_normal((c, h, w)).astype(np.float32)
        elif kind == 1:  # strided columns and reversed rows
            image = generator.standard_normal((c, h, 2 * w)).astype(np.float32)[:, ::-1, ::2]
        elif kind == 2:  # transposed: W is not the last axis in memory
            image = np.ascontiguousarray(
                generator.standard_normal((w, h, c)).astype(np.float32)
            ).transpose(2, 1, 0)
        else:  # special values
            image = generator.choice(
                np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3e38], np.float32),
                size=(c, h, w),
            )
        target_kind = int(generator.integers(0, 3))
        target: Any = ()
        if target_kind == 1:
            target = generator.integers(-5, 80, size=int(generator.integers(0, 5))).astype(np.int32)
        elif target_kind == 2:
            target = [int(t) for t in generator.integers(0, 80, size=2)]
        label: Any = int(generator.integers(-(2**31), 2**31))
        if generator.integers(0, 3) == 0:  # numpy integers are labels too
            label = [np.int64, np.int32, np.uint16][int(generator.integers(0, 3))](label % 60000)
        samples.append(ImageSample(image, target, label))
    return samples


AUGMENTS: list[Callable[[np.random.Generator], Any]] = [
    lambda g: None,
    lambda g: GainOffset(float(g.uniform(0, 2)), float(g.uniform(0, 2)), int(g.integers(1, 5))),
    lambda g: GainOffset(0.0, 0.0),
    lambda g: Doubling(),
    lambda g: Negating(),
]


@pytest.mark.parametrize("augment_index", range(len(AUGMENTS)))
def test_image_collator_matches_numpy(augment_index: int) -> None:
    generator = np.random.default_rng(100 + augment_index)
    for trial in range(40):
        n = int(generator.integers(1, 9))
        samples = random_images(generator, n)
        pad = float(generator.choice([0.0, -1.5, 1e30, -0.0, 255.0]))
        collator = ImageBatchCollator(
            int(generator.integers(1, 6)), pad, AUGMENTS[augment_index](generator)
        )
        indices = generator.integers(0, 2**31, size=n)
        plan = BatchPlan(int(generator.integers(0, 2**64, dtype=np.uint64)), trial, 1, 2, indices)
        fast, slow = both(lambda c=collator, s=samples, p=plan: arrays_of(c(s, p), "image"))  # type: ignore[misc]
        assert fast == slow


def test_image_collator_spec_workload_matches_numpy() -> None:
    from aioloader.core import ShuffledSampler

    data = list(line_images(256, 32, 64, 256, seed=3)._samples)
    sampler = ShuffledSampler(256, 32)
    collator = ImageBatchCollator(4, augment=GainOffset())
    for g in (0, 7, 8, 100):
        plan = plan_batch(sampler, 5, g)
        chosen = [data[i] for i in plan.indices.tolist()]
        fast, slow = both(lambda s=chosen, p=plan: arrays_of(collator(s, p), "image"))  # type: ignore[misc]
        assert fast == slow


def test_image_kernels_release_the_gil_safely_across_threads() -> None:
    data = list(line_images(64, 8, 4, 40, seed=1)._samples)
    collator = ImageBatchCollator(4, augment=GainOffset())
    plans = [BatchPlan(9, g, 0, g, np.arange(g, g + 16)) for g in range(8)]
    with _backend.use_kernels("numpy"):
        expected = [arrays_of(collator(data[g : g + 16], plans[g]), "image") for g in range(8)]
    results: dict[int, Any] = {}

    def work(worker: int) -> None:
        for g in range(8):
            results[worker * 8 + g] = arrays_of(collator(data[g : g + 16], plans[g]), "image")

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    with _backend.use_kernels("numba"):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert all(results[k] == expected[k % 8] for k in range(32))


BAD_SAMPLES: list[Callable[[], list[Any]]] = [
    list,
    lambda: [ImageSample(np.ones((1, 2, 3), np.float32)), "not a sample"],
    lambda: [ImageSample(np.ones((1, 2, 3), np.float64))],
    lambda: [ImageSample(np.ones((2, 3), np.float32))],
    lambda: [
        ImageSample(np.ones((1, 2, 3), np.float32)),
        ImageSample(np.ones((1, 3, 3), np.float32)),
    ],
    lambda: [ImageSample(np.ones((1, 2, 0), np.float32))],
    lambda: [ImageSample(np.ones((1, 2, 3), np.float32), label=2**31)],
    lambda: [ImageSample(np.ones((1, 2, 3), np.float32), label=True)],
    lambda: [ImageSample(np.ones((1, 2, 3), np.float32), label=np.int64(2**40))],
    lambda: [ImageSample(np.ones((1, 2, 3), np.float32), target=np.ones((2, 2), np.int32))],
    lambda: [ImageSample(np.ones((1, 2, 3), np.float32), target=[2**40])],
    lambda: [
        ImageSample(np.ones((1, 2, 3), np.float32), target=np.array([1.5])),
        ImageSample([[[1.0]]]),  # type: ignore[arg-type]
    ],
]


@pytest.mark.parametrize("make", BAD_SAMPLES)
def test_image_collator_errors_match_numpy(make: Callable[[], list[Any]]) -> None:
    samples = make()
    plan = BatchPlan(0, 0, 0, 0, np.arange(len(samples)))
    fast, slow = both(lambda: arrays_of(ImageBatchCollator()(samples, plan), "image"))
    assert fast[0] == "error"
    assert fast == slow


def test_planar_conversions_match_numpy() -> None:
    generator = np.random.default_rng(7)
    for _ in range(30):
        h, stride = int(generator.integers(0, 6)), int(generator.integers(3, 40))
        pixels = generator.integers(0, 256, size=(h, 2 * stride), dtype=np.uint8)[:, ::2]
        mean = [float(m) for m in generator.uniform(-1, 1, 3)]
        std = [float(s) for s in generator.uniform(0.01, 3, 3)]
        width = int(generator.integers(1, stride // 3 + 1))
        contiguous = np.ascontiguousarray(pixels)
        contiguous.flags.writeable = False  # decoded images often are (np.asarray(PIL image))
        for convert in (
            lambda p=pixels, w=width, m=mean[0], s=std[0]: gray8_to_planar(p, w, m, s),
            lambda p=pixels, w=width, m=mean, s=std: rgb8_to_planar(p, w, m, s),
            lambda p=contiguous, m=mean, s=std: rgb8_to_planar(p, None, m, s),
        ):
            fast, slow = both(lambda f=convert: _snapshot(f()))  # type: ignore[misc]
            assert fast == slow


# -- sequences --------------------------------------------------------------------------
DTYPES = [np.int64, np.int32, np.uint8, np.float32, np.float64, np.bool_, np.complex64, np.int16]


def random_sequences(generator: np.random.Generator, n: int, short: bool = False) -> list[Any]:
    dtype = DTYPES[int(generator.integers(0, len(DTYPES)))]
    trailing = [(), (2,), (3, 2), (0,)][int(generator.integers(0, 4))]
    top = 3 if short else 12
    out: list[Any] = []
    for _ in range(n):
        length = int(generator.integers(0, top))
        values = generator.integers(0, 200, size=(length, *trailing)).astype(dtype)  # type: ignore[var-annotated]
        kind = int(generator.integers(0, 5))
        if kind == 1 and length:  # a strided view: the reference path runs for this batch
            values = np.repeat(values, 2, axis=0)[::2]
        elif kind == 2:  # another dtype: numpy casts, so the reference runs
            values = values.astype(np.complex128 if values.dtype.kind == "c" else np.float64)
        elif kind == 3 and not trailing:
            out.append(values.tolist())
            continue
        out.append(values)
    return out


def test_pad_collator_matches_numpy() -> None:
    generator = np.random.default_rng(11)
    for _ in range(150):
        n = int(generator.integers(1, 7))
        seqs = random_sequences(generator, n)
        value = [0, -1, 7, 2.5, True][int(generator.integers(0, 5))]
        side = ["right", "left"][int(generator.integers(0, 2))]
        collator = PadCollator(value, side)
        plan = BatchPlan(0, 0, 0, 0, np.arange(n))
        fast, slow = both(lambda c=collator, s=seqs, p=plan: arrays_of(c(s, p), "pad"))  # type: ignore[misc]
        assert fast == slow


def test_pad_collator_uses_the_kernel_for_plain_batches() -> None:
    seqs = [np.arange(5, dtype=np.int32), np.arange(2, dtype=np.int32)]
    plan = BatchPlan(0, 0, 0, 0, np.arange(2))
    fast, slow = both(lambda: arrays_of(PadCollator(-3, "left")(seqs, plan), "pad"))
    assert fast == slow
    assert np.frombuffer(fast[1]["tokens"][2], np.int32).tolist() == [
        0, 1, 2, 3, 4, -3, -3, -3, 0, 1,
    ]  # fmt: skip


def test_pad_collator_fills_long_padding_with_a_multibyte_pattern() -> None:
    # 7 as int64 is 8 unequal bytes: the kernel writes it once, then doubles the copies
    seqs = [np.arange(300, dtype=np.int64), np.arange(1, dtype=np.int64)]
    plan = BatchPlan(0, 0, 0, 0, np.arange(2))
    for side in ("right", "left"):
        fast, slow = both(lambda s=side: arrays_of(PadCollator(7, s)(seqs, plan), "pad"))  # type: ignore[misc]
        assert fast == slow
        short = np.frombuffer(fast[1]["tokens"][2], np.int64).reshape(2, 300)[1]
        expected = [0] + [7] * 299 if side == "right" else [7] * 299 + [0]
        assert short.tolist() == expected


def test_pad_collator_errors_match_numpy() -> None:
    plan = BatchPlan(0, 0, 0, 0, np.arange(2))
    seqs = [np.arange(3, dtype=np.uint8), np.arange(2, dtype=np.uint8)]
    fast, slow = both(lambda: arrays_of(PadCollator(-1)(seqs, plan), "pad"))
    assert fast[0] == "error"
    assert fast == slow


@pytest.mark.parametrize("causal", [False, True])
def test_pack_collator_matches_numpy(causal: bool) -> None:
    generator = np.random.default_rng(13 + causal)
    for trial in range(60):
        n = int(generator.integers(1, 8))
        seqs = random_sequences(generator, n)
        context = int(generator.integers(1, 9))
        overflow = ["split", "drop"][int(generator.integers(0, 2))]
        if overflow == "drop" and all(np.asarray(s).shape[0] > context for s in seqs):
            overflow = "split"
        value = [0, -1, 9][int(generator.integers(0, 3))]
        collator = PackCollator(context, overflow=overflow, padding_value=value, causal_mask=causal)
        plan = BatchPlan(0, trial, 0, trial, np.arange(n))
        fast, slow = both(lambda c=collator, s=seqs, p=plan: arrays_of(c(s, p), "pack"))  # type: ignore[misc]
        assert fast == slow


def test_pack_collator_with_sampler_matches_numpy() -> None:
    generator = np.random.default_rng(17)
    lengths = generator.integers(1, 40, size=50)
    documents = [np.arange(length, dtype=np.int32) * 3 for length in lengths.tolist()]
    sampler = PackedSampler(lengths, 32, 4)
    collator = PackCollator(32, sampler=sampler, padding_value=-1, causal_mask=True)
    for step in range(sampler.steps_per_epoch):
        plan = BatchPlan(5, step, 0, step, sampler.indices(5, 0, step))
        chosen = [documents[i] for i in plan.indices.tolist()]
        fast, slow = both(lambda s=chosen, p=plan: arrays_of(collator(s, p), "pack"))  # type: ignore[misc]
        assert fast == slow
    # a sequence shorter than the sampler expects: both paths raise the same error
    plan = BatchPlan(5, 0, 0, 0, sampler.indices(5, 0, 0))
    chosen = [documents[i][:1] for i in plan.indices.tolist()]
    fast, slow = both(lambda: arrays_of(collator(chosen, plan), "pack"))
    assert fast[0] == "error"
    assert fast == slow


def test_common_batches_take_the_compiled_path(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    names = ("fill_image_batch", "fill_images", "pad_into", "pack_into", "causal_mask")
    for name in (*names, "rgb_to_planar"):
        kernel = getattr(_kernels, name)

        def counted(*args: Any, _kernel: Any = kernel, _name: str = name) -> Any:
            calls.append(_name)
            return _kernel(*args)

        monkeypatch.setattr(_kernels, name, counted)
    images = list(line_images(4, 4, 2, 6)._samples)
    plan = BatchPlan(0, 0, 0, 0, np.arange(4))
    ImageBatchCollator(augment=GainOffset())(images, plan).release()
    bare = [
        ImageSample(np.ones((2, 1, k), np.float32)[:, :, ::-1], label=np.int64(k))
        for k in (1, 2, 3, 4)
    ]
    ImageBatchCollator()(bare, plan).release()
    seqs = [np.arange(k, dtype=np.int64) for k in (3, 1, 4, 1)]
    PadCollator()(seqs, plan).release()
    PackCollator(4, causal_mask=True)(seqs, plan).release()
    rgb8_to_planar(np.zeros((2, 6), np.uint8))
    assert calls == [
        "fill_image_batch",
        "fill_image_batch",
        "pad_into",
        "pack_into",
        "causal_mask",
        "rgb_to_planar",
    ]


def test_keyed_permutation_matches_numpy() -> None:
    generator = np.random.default_rng(19)
    sizes = [2, 3, 10, 1000, 2**31 + 11, 2**40, 2**63 + 5, 2**64 - 1]
    sizes += [int(n) for n in generator.integers(2, 2**20, size=8)]
    for n in sizes:
        key = int(generator.integers(0, 2**64, dtype=np.uint64))
        count = min(n, 300)
        positions = np.unique(generator.integers(0, n, size=count, dtype=np.uint64))
        shaped = positions[: positions.shape[0] // 2 * 2].reshape(2, -1)
        for lanes in (positions, shaped, positions.astype(np.int64) if n < 2**63 else positions):
            fast, slow = both(
                lambda p=lanes, n=n, k=key: _snapshot(keyed_permutation_array(p, n, k))  # type: ignore[misc]
            )
            assert fast == slow
        assert (
            both(
                lambda n=n, k=key: _snapshot(keyed_permutation_array(np.array([], np.uint64), n, k))  # type: ignore[misc]
            )[0][0]
            == "ok"
        )
    every = both(lambda: sorted(keyed_permutation_array(np.arange(1000), 1000, 5).tolist()))
    assert every[0] == every[1] == ("ok", list(range(1000)))


@pytest.mark.parametrize("kernels", ["numba", "numpy"])
def test_permutation_reference_vectors_with_both_kernels(
    kernels: str, public_vectors: dict[str, Any]
) -> None:
    with _backend.use_kernels(kernels):
        for case in public_vectors["perm"]:
            n, key = int(case["n"]), int(case["key"])
            if case["kind"] == "full":
                positions, expected = list(range(n)), case["perm"]
            else:
                positions = [int(p) for p, _ in case["pairs"]]
                expected = [int(q) for _, q in case["pairs"]]
            lanes = np.array(positions, dtype=np.uint64)
            assert keyed_permutation_array(lanes, n, key).tolist() == expected


def _count_calls(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    calls: list[int] = []
    _backend.load()  # every kernel compiled: the module attribute is the dispatcher
    kernel = getattr(_kernels, name)

    def counted(*args: Any) -> Any:
        calls.append(1)
        return kernel(*args)

    monkeypatch.setattr(_kernels, name, counted)
    return calls


def _whole_batch_cases() -> list[tuple[list[ImageSample], BatchPlan]]:
    import pickle

    data = list(line_images(40, 5, 1, 9, seed=8)._samples)
    strided = [
        ImageSample(s.image[:, ::-1, :], np.repeat(np.asarray(s.target, np.int32), 2)[::2], s.label)
        for s in data
    ]
    no_targets = [ImageSample(s.image, (), np.int32(s.label)) for s in data]
    unpickled = pickle.loads(pickle.dumps(data))  # dtype objects equal to numpy's, not them
    indices = np.arange(7, 23, dtype=np.int64)
    slots = np.arange(16, 32, dtype=np.int64)  # a rank's lanes in the global batch
    return [
        (data[7:23], BatchPlan(3, 9, 1, 2, indices)),
        (data[7:23], BatchPlan(3, 9, 1, 2, indices, slots)),
        (strided[7:23], BatchPlan(2**64 - 1, 9, 2**40, 5, indices)),
        (no_targets[7:23], BatchPlan(3, 9, 1, 2, indices)),
        (unpickled[7:23], BatchPlan(3, 9, 1, 2, indices)),
        (data[:1], BatchPlan(0, 0, 0, 0, np.array([2**31 - 1]))),
    ]


@pytest.mark.parametrize("augment", [None, GainOffset(), GainOffset(0.7, 1.3)])
def test_whole_batch_kernel_matches_numpy(
    monkeypatch: pytest.MonkeyPatch, augment: GainOffset | None
) -> None:
    calls = _count_calls(monkeypatch, "fill_image_batch")
    collator = ImageBatchCollator(4, -2.5, augment)
    cases = _whole_batch_cases()
    for samples, plan in cases:
        fast, slow = both(lambda s=samples, p=plan: arrays_of(collator(s, p), "image"))  # type: ignore[misc]
        assert fast[0] == "ok"
        assert fast == slow
    assert len(calls) == len(cases)


@pytest.mark.parametrize(
    "indices", [[0, -1], [2**31, 0], [0, 2**63 - 1]], ids=["negative", "2^31", "huge"]
)
def test_whole_batch_kernel_declines_bad_indices_with_the_reference_error(
    monkeypatch: pytest.MonkeyPatch, indices: list[int]
) -> None:
    calls = _count_calls(monkeypatch, "fill_image_batch")
    samples = list(line_images(2, 3, 1, 4)._samples)
    plan = BatchPlan(0, 0, 0, 0, np.array(indices, np.int64))
    fast, slow = both(lambda: arrays_of(ImageBatchCollator()(samples, plan), "image"))
    assert fast[0] == "error"
    assert fast == slow
    assert calls == []


def test_whole_batch_kernel_declines_mixed_dtype_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    calls = _count_calls(monkeypatch, "fill_image_batch")
    data = list(line_images(4, 3, 1, 4)._samples)
    mixed = data[:2] + pickle.loads(pickle.dumps(data[2:]))
    plan = BatchPlan(0, 0, 0, 0, np.arange(4))
    collator = ImageBatchCollator(augment=GainOffset())
    fast, slow = both(lambda: arrays_of(collator(mixed, plan), "image"))
    assert fast == slow
    assert fast[0] == "ok"
    assert calls == []


def test_first_fit_kernel_gives_the_reference_rows() -> None:
    generator = np.random.default_rng(23)
    cases = [(np.array([5, 23, 9, 31, 14, 7, 18, 4, 27, 11, 16, 8]), 32), (np.zeros(5, int), 7)]
    for _ in range(200):
        cap = int(generator.integers(1, 64))
        count = int(generator.integers(0, 300))
        cases.append((generator.integers(0, cap + 1, size=count), cap))
        cases.append((generator.choice([0, 1, cap // 2, cap], size=count), cap))  # ties
    for sizes, cap in cases:
        fast, slow = both(lambda s=sizes, c=cap: _snapshot(first_fit_decreasing(s, c)))  # type: ignore[misc]
        assert fast == slow
    lengths = generator.lognormal(np.log(200), 1.0, 20_000).astype(np.int64) % 2048 + 1
    fields = ("documents", "starts", "lengths", "offsets", "row_ptr")
    fast, slow = both(lambda: [_snapshot(getattr(pack_lengths(lengths, 512), f)) for f in fields])
    assert fast == slow


def test_first_fit_kernel_hands_back_what_its_tree_cannot_hold() -> None:
    _backend.load()
    kernels = _backend.compiled()
    assert kernels is not None
    rows = np.empty(3, np.int64)
    tree = np.empty(2, np.int64)  # one row of room 10: the third item does not fit
    assert kernels.first_fit_rows(np.array([6, 4, 5], np.int64), 10, rows, tree) == 2
    assert rows[:2].tolist() == [0, 0]
