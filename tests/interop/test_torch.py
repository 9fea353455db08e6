"""aioloader.interop.torch: zero-copy tensors, device transfer, and the IterableDataset adapter."""

from __future__ import annotations

import threading
from collections import OrderedDict, defaultdict
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
import torch.utils.data

from aioloader.core import SequentialSampler, ShuffledSampler, plan_batch
from aioloader.engine import DataLoader
from aioloader.interop.torch import TorchIterableDataset, to_device, to_torch
from aioloader.testing import ArrayBatch, MemoryDataset, StackCollator
from tests._support.threads import assert_threads_started_since_end
from tests.interop.helpers import Inner, Pair

SEED = 77


def _ptr(array: npt.NDArray[Any]) -> int:
    return int(array.ctypes.data)


def _samples(n: int) -> list[npt.NDArray[np.float32]]:
    return [np.full(3, i, dtype=np.float32) + np.arange(3, dtype=np.float32) / 4 for i in range(n)]  # type: ignore[misc]


def _loader(n: int = 20, batch: int = 4) -> DataLoader[Any, ArrayBatch]:
    return DataLoader(
        MemoryDataset(_samples(n)),
        ShuffledSampler(n, batch, drop_last=False),
        StackCollator(),
        seed=SEED,
    )


# -- to_torch -----------------------------------------------------------------------------


def test_array_batch_becomes_tensors_without_copies() -> None:
    batch = ArrayBatch(5, np.array([3, 1, 2], dtype=np.int64), np.ones((3, 4), dtype=np.float32))
    converted = to_torch(batch)
    assert type(converted) is ArrayBatch
    assert converted.global_step == 5
    assert isinstance(converted.indices, torch.Tensor)
    assert converted.indices.dtype == torch.int64
    assert converted.data.dtype == torch.float32
    assert converted.data.shape == (3, 4)
    assert converted.indices.data_ptr() == _ptr(batch.indices)
    assert converted.data.data_ptr() == _ptr(batch.data)
    converted.data[1, 2] = 7.0  # the same memory: a write shows through the array
    assert batch.data[1, 2] == 7.0


def test_nested_containers() -> None:
    a = np.arange(4, dtype=np.int32)
    b = np.zeros((2, 2), dtype=np.float64)
    c = np.arange(3, dtype=np.uint8)
    d = np.ones(2, dtype=np.bool_)
    existing = torch.arange(3)
    batch = {
        "pair": Pair(a, [b, "text"]),
        "inner": Inner(c, "name"),
        "tuple": (d, b"raw", 3.5, None),
        "tensor": existing,
        "scalar": np.float32(2.5),
        "ordered": OrderedDict(x=a),
    }
    out = to_torch(batch)
    assert list(out) == ["pair", "inner", "tuple", "tensor", "scalar", "ordered"]
    assert type(out["pair"]) is Pair
    assert out["pair"].left.data_ptr() == _ptr(a)
    assert out["pair"].right[0].data_ptr() == _ptr(b)
    assert out["pair"].right[1] == "text"
    assert type(out["inner"]) is Inner
    assert out["inner"].values.data_ptr() == _ptr(c)
    assert out["inner"].values.dtype == torch.uint8
    assert out["inner"].name == "name"
    assert out["tuple"][0].dtype == torch.bool
    assert out["tuple"][0].data_ptr() == _ptr(d)
    assert out["tuple"][1:] == (b"raw", 3.5, None)
    assert out["tensor"] is existing
    assert out["scalar"].shape == ()
    assert out["scalar"].dtype == torch.float32
    assert out["scalar"].item() == 2.5
    assert type(out["ordered"]) is OrderedDict
    assert out["ordered"]["x"].data_ptr() == _ptr(a)
    assert isinstance(a, np.ndarray)  # the input is untouched


def test_dict_subclass_with_another_constructor_becomes_a_dict() -> None:
    groups: defaultdict[str, Any] = defaultdict(list, {"x": np.arange(2)})
    out = to_torch(groups)
    assert type(out) is dict
    assert out["x"].tolist() == [0, 1]


def test_strided_views_are_shared() -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = base[1:, ::2]
    tensor = to_torch(view)
    assert tensor.data_ptr() == _ptr(view)
    assert tensor.stride() == (6, 2)
    assert tensor.tolist() == view.tolist()


def test_arrays_torch_cannot_share_are_copied() -> None:
    frozen = np.arange(5, dtype=np.int64)
    frozen.flags.writeable = False
    reversed_view = np.arange(5, dtype=np.int64)[::-1]
    out = to_torch({"frozen": frozen, "reversed": reversed_view})  # and no warning
    assert out["frozen"].tolist() == [0, 1, 2, 3, 4]
    assert out["frozen"].data_ptr() != _ptr(frozen)
    assert out["reversed"].tolist() == [4, 3, 2, 1, 0]


# -- to_device ----------------------------------------------------------------------------


def test_to_cpu_shares_memory() -> None:
    batch = ArrayBatch(0, np.arange(3, dtype=np.int64), np.ones((3, 2), dtype=np.float16))
    for device in ("cpu", torch.device("cpu")):
        moved = to_device(batch, device)
        assert moved.data.device == torch.device("cpu")
        assert moved.data.dtype == torch.float16
        assert moved.data.data_ptr() == _ptr(batch.data)
        assert moved.indices.data_ptr() == _ptr(batch.indices)
    blocking = to_device({"x": batch.data}, "cpu", non_blocking=False)
    assert blocking["x"].data_ptr() == _ptr(batch.data)


def test_pin_memory_without_accelerator_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    with pytest.raises(
        RuntimeError, match=r"pin_memory=True requires an accelerator but torch finds none"
    ):
        to_device({"x": np.zeros(2)}, "cpu", pin_memory=True)


def test_pin_memory_on_this_machine() -> None:
    batch = {"x": np.arange(6, dtype=np.float32)}
    if not torch.accelerator.is_available():
        with pytest.raises(RuntimeError, match="pin_memory=True requires an accelerator"):
            to_device(batch, "cpu", pin_memory=True)
        return
    device = torch.accelerator.current_accelerator()
    assert device is not None
    moved = to_device(batch, device, pin_memory=True)
    assert moved["x"].device.type == device.type
    assert moved["x"].cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    pinned = to_device(batch, "cpu", pin_memory=True)
    assert pinned["x"].is_pinned()


# -- TorchIterableDataset -----------------------------------------------------------------


def test_adapter_serves_the_stream_to_a_torch_dataloader() -> None:
    loader = _loader()  # 5 steps per epoch
    adapter = TorchIterableDataset(loader, 3, 12)
    assert isinstance(adapter, torch.utils.data.IterableDataset)
    assert len(adapter) == 9
    torch_loader = torch.utils.data.DataLoader(adapter, batch_size=None, num_workers=0)
    assert len(torch_loader) == 9
    batches = list(torch_loader)
    assert [b.global_step for b in batches] == list(range(3, 12))
    samples = _samples(20)
    for batch in batches:
        expected = plan_batch(loader.sampler, SEED, batch.global_step).indices
        assert isinstance(batch.indices, torch.Tensor)
        assert batch.indices.tolist() == expected.tolist()
        assert isinstance(batch.data, torch.Tensor)
        assert batch.data.dtype == torch.float32
        assert batch.data.tolist() == np.stack([samples[i] for i in expected]).tolist()
    assert loader.state_dict()["next_step"] == 0  # an explicit range leaves the cursor alone


def test_adapter_checkpoint_and_resume() -> None:
    loader = _loader()
    adapter = TorchIterableDataset(loader)  # from the loader's cursor, without end
    torch_loader = torch.utils.data.DataLoader(adapter, batch_size=None, num_workers=0)
    taken = []
    for batch in torch_loader:
        taken.append(batch.global_step)
        if len(taken) == 7:
            break
    state = loader.state_dict()
    assert state["next_step"] == 7
    assert taken == list(range(7))

    resumed = _loader()
    resumed.load_state_dict(state)
    rest = list(TorchIterableDataset(resumed, stop=10))
    assert [b.global_step for b in rest] == [7, 8, 9]
    assert len(TorchIterableDataset(resumed, stop=12)) == 2  # from the cursor, now 10
    for batch in rest:
        expected = plan_batch(resumed.sampler, SEED, batch.global_step).indices
        assert batch.indices.tolist() == expected.tolist()


def test_adapter_without_conversion_yields_numpy() -> None:
    loader = DataLoader(
        MemoryDataset(_samples(8)), SequentialSampler(8, 4), StackCollator(), seed=SEED
    )
    batches = list(TorchIterableDataset(loader, 0, 2, convert=False))
    assert [type(b.data) for b in batches] == [np.ndarray, np.ndarray]
    assert [b.indices.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_leaving_early_stops_the_loader_thread() -> None:
    before = set(threading.enumerate())
    iterator = iter(TorchIterableDataset(_loader()))
    assert next(iterator).global_step == 0
    assert len(set(threading.enumerate()) - before) >= 1  # the event loop's portal thread
    iterator.close()  # type: ignore[attr-defined]
    left = set(threading.enumerate()) - before
    # The portal's thread has ended; anyio's worker threads were told to stop as the loop
    # closed and end on their own, possibly just after close() returns.
    assert {thread.name for thread in left} <= {"AnyIO worker thread"}
    assert_threads_started_since_end(before)


class _FakeWorkerInfo:
    num_workers = 2


def test_several_torch_workers_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.utils.data, "get_worker_info", _FakeWorkerInfo)
    with pytest.raises(
        RuntimeError,
        match=r"must be read by at most one torch worker but got num_workers=2; "
        r"use num_workers=0",
    ):
        iter(TorchIterableDataset(_loader()))


def test_adapter_bad_arguments() -> None:
    with pytest.raises(TypeError, match=r"loader must be an aioloader DataLoader .* but got list"):
        TorchIterableDataset([])
    with pytest.raises(ValueError, match=r"stop must be >= start \(5\) but got 4"):
        TorchIterableDataset(_loader(), 5, 4)
    with pytest.raises(ValueError, match=r"start must be an integer in \[0, 2\^64\) but got -1"):
        TorchIterableDataset(_loader(), -1)
    with pytest.raises(TypeError, match=r"len\(\) of an endless TorchIterableDataset"):
        len(TorchIterableDataset(_loader()))


def test_pooled_batches_become_tensor_batches_sharing_memory() -> None:
    from aioloader import GainOffset, ImageBatchCollator, ShuffledSampler
    from aioloader.core import plan_batch
    from aioloader.datasets import line_images
    from aioloader.interop.torch import TensorBatch

    dataset = line_images(count=16, height=4, min_width=4, max_width=8)
    plan = plan_batch(ShuffledSampler(16, 4), 0, 1)
    batch = ImageBatchCollator(4, augment=GainOffset())(
        [dataset._samples[i] for i in plan.indices.tolist()], plan
    )
    tensors = to_torch(batch)
    assert isinstance(tensors, TensorBatch)
    assert tensors.images.data_ptr() == batch.images.ctypes.data
    assert tensors["widths"].tolist() == batch.widths.tolist()
    assert tensors.global_step == 1
