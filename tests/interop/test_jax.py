"""aioloader.interop.jax: device arrays, and RankSlice slices assembled into global arrays."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")  # CI installs jax; skipped only where it is absent

from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from aioloader.core import RankSlice, SequentialSampler  # noqa: E402
from aioloader.core._images import ImageBatchCollator, ImageSample  # noqa: E402
from aioloader.core._plan import plan_batch  # noqa: E402
from aioloader.core._pool import BufferPool  # noqa: E402
from aioloader.engine import DataLoader  # noqa: E402
from aioloader.interop.jax import batch_sharding, to_global_array, to_jax  # noqa: E402
from aioloader.testing import MemoryDataset, StackCollator  # noqa: E402
from tests.interop.helpers import Inner, Pair  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _aligned(values: list[int]) -> np.ndarray[Any, Any]:
    """An int32 array on a 64-byte boundary, as pool buffers are (jax on CPU shares those)."""
    raw = np.zeros(4 * len(values) + 64, np.uint8)
    start = -raw.ctypes.data % 64
    array = raw[start : start + 4 * len(values)].view(np.int32)
    array[:] = values
    assert array.ctypes.data % 64 == 0
    return array


def _rows(n: int) -> list[np.ndarray[Any, Any]]:
    return [np.arange(3, dtype=np.float32) + 10 * i for i in range(n)]


# -- to_jax -------------------------------------------------------------------------------


def test_image_batch_becomes_a_dict_of_copies() -> None:
    pool = BufferPool()
    collator = ImageBatchCollator(pool=pool)
    samples = [
        ImageSample(np.full((1, 2, 2), i, dtype=np.float32), [i, i + 1], label=i) for i in (3, 4)
    ]
    batch = collator(samples, plan_batch(SequentialSampler(8, 2), 5, 1))
    converted = to_jax(batch)
    batch.release()
    again = collator(samples[::-1], plan_batch(SequentialSampler(8, 2), 5, 0))  # reuses buffers
    assert list(converted) == [
        "images",
        "widths",
        "targets",
        "target_lengths",
        "labels",
        "indices",
        "global_step",
        "epoch",
        "step",
    ]
    assert converted["images"].tolist() == [[[[3.0, 3.0], [3.0, 3.0]]], [[[4.0, 4.0], [4.0, 4.0]]]]
    assert converted["images"].dtype == np.float32
    assert converted["targets"].tolist() == [3, 4, 4, 5]
    assert converted["labels"].tolist() == [3, 4]
    assert converted["indices"].tolist() == [2, 3]
    assert (converted["global_step"], converted["epoch"], converted["step"]) == (1, 0, 1)
    assert again.images[0, 0, 0, 0] == 4.0


def test_containers_are_walked_and_arrays_copied() -> None:
    source = _aligned([0, 1, 2, 3])
    batch = {
        "pair": Pair(source, "name"),
        "inner": Inner([source, np.float32(1.5)], "tag"),
        "ordered": OrderedDict(a=source),
        "count": 7,
    }
    converted = to_jax(batch)
    source[0] = 99
    assert type(converted["pair"]) is Pair
    assert isinstance(converted["pair"].left, jax.Array)
    assert converted["pair"].left.tolist() == [0, 1, 2, 3]
    assert converted["pair"].right == "name"
    assert type(converted["inner"]) is Inner
    assert converted["inner"].values[1].tolist() == 1.5
    assert converted["inner"].name == "tag"
    assert type(converted["ordered"]) is OrderedDict
    assert converted["count"] == 7


def test_device_argument_places_the_arrays() -> None:
    device = jax.devices()[0]
    converted = to_jax((np.ones(2, np.float32),), device)
    assert converted[0].devices() == {device}


def test_device_must_be_a_device_or_sharding() -> None:
    with pytest.raises(TypeError) as info:
        to_jax(np.zeros(1), "cpu")
    assert str(info.value) == (
        "device must be a jax.Device, a jax.sharding.Sharding or None but got str"
    )


# -- batch_sharding and to_global_array in one process ------------------------------------


def _mesh() -> Mesh:
    return Mesh(np.array(jax.devices()[:1]), ("data",))


def test_batch_sharding_splits_rows_over_the_named_axes() -> None:
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("data", "model"))
    assert batch_sharding(mesh).spec == PartitionSpec(("data", "model"))
    assert batch_sharding(mesh, "data").spec == PartitionSpec("data")
    assert batch_sharding(mesh, ["model"]).spec == PartitionSpec("model")


@pytest.mark.parametrize(
    ("mesh", "axes", "error", "message"),
    [
        ("mesh", None, TypeError, "mesh must be a jax.sharding.Mesh but got str"),
        (
            None,
            "batch",
            ValueError,
            "batch_axes must name axes of the mesh ('data',) but got 'batch'",
        ),
        (None, (), ValueError, "batch_axes must name axes of the mesh ('data',) but got ()"),
    ],
)
def test_batch_sharding_errors(mesh: Any, axes: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        batch_sharding(_mesh() if mesh is None else mesh, axes)
    assert str(info.value) == message


def test_rank_slice_batches_become_global_arrays() -> None:
    sampler = RankSlice(SequentialSampler(12, 4), 0, 1)
    loader: DataLoader[Any, Any] = DataLoader(
        MemoryDataset(_rows(12)), sampler, StackCollator(), seed=3
    )
    mesh = _mesh()
    seen = []
    for batch in loader.iter_sync(0, 3):
        converted = to_global_array(batch, mesh)
        assert converted.global_step == batch.global_step
        assert converted.data.shape == (4, 3)
        assert converted.data.sharding == NamedSharding(mesh, PartitionSpec("data"))
        seen.append(converted.data[:, 0].tolist())
    assert seen == [[0.0, 10.0, 20.0, 30.0], [40.0, 50.0, 60.0, 70.0], [80.0, 90.0, 100.0, 110.0]]


def test_a_sharding_is_taken_as_it_is() -> None:
    sharding = NamedSharding(_mesh(), PartitionSpec("data"))
    local = _aligned([0, 1, 2, 3, 4, 5]).reshape(3, 2)
    result = to_global_array(local, sharding)
    local[0, 0] = 99
    assert result.sharding == sharding
    assert result.tolist() == [[0, 1], [2, 3], [4, 5]]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"rank": 1}, ValueError, "rank must be an integer in [0, world_size) = [0, 1) but got 1"),
        ({"world_size": 0}, ValueError, "world_size must be an integer >= 1 but got 0"),
        (
            {"rank": 1, "world_size": 2},
            ValueError,
            "the sharding must give this process (rank 1 of 2) the contiguous rows [2, 4) of "
            "the global batch of 4, as RankSlice does, but its devices hold rows [0, 4); order "
            "the mesh's devices by process, or pass the RankSlice's rank and world_size",
        ),
    ],
)
def test_rank_must_match_the_rows_of_the_sharding(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        to_global_array(np.zeros((2, 1), np.float32), _mesh(), **kwargs)
    assert str(info.value) == message


def test_to_global_array_argument_errors() -> None:
    with pytest.raises(TypeError) as type_info:
        to_global_array(np.zeros(2), "mesh")  # type: ignore[arg-type]
    assert str(type_info.value) == (
        "sharding must be a jax.sharding.Sharding or a jax.sharding.Mesh but got str"
    )
    sharding = batch_sharding(_mesh())
    with pytest.raises(ValueError, match="batch_axes") as axes_info:
        to_global_array(np.zeros(2), sharding, batch_axes="data")
    assert str(axes_info.value) == "batch_axes applies to a Mesh only but got 'data'"
    with pytest.raises(ValueError, match="0-d") as scalar_info:
        to_global_array(np.float32(2.0), sharding)
    assert str(scalar_info.value) == (
        "to_global_array needs arrays whose dimension 0 is the batch but got a 0-d array "
        "(array(2., dtype=float32))"
    )


# -- several devices and several processes, in subprocesses -------------------------------

MULTI_DEVICE = """
import jax, numpy as np
from aioloader.interop.jax import to_global_array
assert jax.device_count() == 4, jax.devices()
local = np.arange(16, dtype=np.float32).reshape(8, 2)
flat = jax.make_mesh((4,), ("data",))
grid = jax.make_mesh((2, 2), ("data", "model"))
for mesh, axes in ((flat, None), (grid, None), (grid, "data")):
    result = to_global_array(local, mesh, batch_axes=axes)
    shards = sorted((s.index[0].start or 0, s.data.tolist()) for s in result.addressable_shards)
    print(len(result.addressable_shards), shards[0], shards[-1])
    print(float(jax.jit(lambda x: x.sum())(result)))
"""


def _run(code: str, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_four_cpu_devices_in_one_process() -> None:
    process = _run(MULTI_DEVICE, _env(4))
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert out.splitlines() == [
        "4 (0, [[0.0, 1.0], [2.0, 3.0]]) (6, [[12.0, 13.0], [14.0, 15.0]])",
        "120.0",
        "4 (0, [[0.0, 1.0], [2.0, 3.0]]) (6, [[12.0, 13.0], [14.0, 15.0]])",
        "120.0",
        "4 (0, [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]) "
        "(4, [[8.0, 9.0], [10.0, 11.0], [12.0, 13.0], [14.0, 15.0]])",
        "120.0",
    ]


MULTI_PROCESS = """
import sys
import jax
import numpy as np
from jax.sharding import Mesh

rank, port = int(sys.argv[1]), sys.argv[2]
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=rank)

from aioloader import DataLoader, RankSlice, ShuffledSampler
from aioloader.interop.jax import to_global_array
from aioloader.testing import MemoryDataset, StackCollator

rows = [np.full(2, i, dtype=np.float32) for i in range(40)]
sampler = ShuffledSampler(40, 8)
local = DataLoader(MemoryDataset(rows), RankSlice(sampler, rank, 2), StackCollator(), seed=5)
whole = DataLoader(MemoryDataset(rows), sampler, StackCollator(), seed=5)
mesh = jax.make_mesh((4,), ("data",))
total = jax.jit(lambda x: x.sum())
for mine, every in zip(local.iter_sync(0, 3), whole.iter_sync(0, 3)):
    result = to_global_array(mine.data, mesh)
    assert result.shape == (8, 2)
    for shard in result.addressable_shards:
        assert shard.data.tolist() == every.data[shard.index].tolist()
    print("result", rank, mine.indices.tolist(), float(total(result)), float(every.data.sum()))
devices = np.array(jax.devices())[[0, 2, 1, 3]]  # processes interleaved: not RankSlice rows
try:
    to_global_array(mine.data, Mesh(devices, ("data",)))
except ValueError as error:
    print("result", rank, str(error).split(";")[0].split(" but ")[1])
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow  # two jax processes
def test_two_processes_assemble_the_global_batch() -> None:
    port = str(_free_port())
    processes = [_run(MULTI_PROCESS, _env(2), str(rank), port) for rank in (0, 1)]
    outputs = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        outputs.append([line for line in out.splitlines() if line.startswith("result ")])
    # The global sum (a jitted reduction over both processes' devices) equals the sum of
    # the unsliced loader's batch: each process fed exactly its RankSlice rows.
    assert outputs == [
        [
            "result 0 [24, 30, 34, 19] 344.0 344.0",
            "result 0 [32, 2, 23, 7] 322.0 322.0",
            "result 0 [5, 13, 29, 38] 342.0 342.0",
            "result 0 its devices hold rows that are not contiguous",
        ],
        [
            "result 1 [33, 1, 11, 20] 344.0 344.0",
            "result 1 [36, 21, 3, 37] 322.0 322.0",
            "result 1 [16, 35, 9, 26] 342.0 342.0",
            "result 1 its devices hold rows that are not contiguous",
        ],
    ]
