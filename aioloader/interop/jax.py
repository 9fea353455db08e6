"""JAX interop: batches as device arrays, and per-process slices as global arrays.

Importing this module imports jax; nothing else in aioloader does.

Numpy arrays are always copied: a pooled batch's buffers are reused after ``release()``
and a jax array must never change. The copy is made on the host because on CPU jax
(0.10) shares 64-byte-aligned numpy memory, as pool buffers are, even when
``jax.device_put(..., may_alias=False)`` or ``jax.make_array_from_process_local_data``
is asked.

>>> import numpy as np
>>> to_jax({"x": np.arange(3, dtype=np.int32)})["x"].tolist()
[0, 1, 2]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from ..core import as_int
from ._device_stream import DeviceStream
from ._jax_device import JaxDevice
from ._walk import map_batch

Leaf = Callable[[Any], Any]


def _convert(obj: Any, leaf: Leaf) -> Any:
    def convert_leaf(value: Any) -> Any | None:
        return leaf(value) if isinstance(value, (np.ndarray, np.generic, jax.Array)) else None

    return map_batch(obj, convert_leaf, dict)  # a pooled batch becomes a dict: a pytree


def to_jax(batch: Any, device: jax.Device | Sharding | None = None) -> Any:
    """``batch`` with every numpy array (and numpy scalar) copied into a ``jax.Array``.

    An aioloader batch (``ImageBatch`` and the other pooled batches, which expose
    ``__batch_fields__``) becomes a dict of its fields, a pytree that ``jax.jit`` takes;
    its buffers may be released as soon as this returns. Walks dataclasses (rebuilt with
    ``dataclasses.replace``), dicts, tuples, namedtuples and lists; anything else (ints,
    strings) is kept as it is.

    Args:
        batch: a batch of numpy arrays, nested as above.
        device: a device or sharding for ``jax.device_put`` (default: jax's default device).
    """
    if device is not None and not isinstance(device, (jax.Device, Sharding)):
        raise TypeError(
            f"device must be a jax.Device, a jax.sharding.Sharding or None but got "
            f"{type(device).__name__}"
        )

    def put(value: Any) -> Any:
        if not isinstance(value, jax.Array):
            value = np.array(value, copy=True)
        return jax.device_put(value, device)

    return _convert(batch, put)


def to_device_stream(
    batches: Any, device: jax.Device | Sharding | None = None, *, depth: int = 2
) -> DeviceStream:
    """Batches of ``batches`` as ``jax.Array`` on ``device``: ``for`` or ``async for``.

    ``for batch in to_device_stream(loader.iter_sync()): ...`` (or ``async for`` over an
    async iterable). The path of ``aioloader.interop.torch.to_device_stream``: each array
    is written into a host staging buffer reused once the arrays put from it are ready,
    ``jax.device_put`` moves it, up to ``depth`` batches ahead, and a batch is handed over
    once its arrays are ready; the host batch is released as soon as it is staged. A pooled
    batch becomes a dict of its fields. The arrays never change afterwards (on CPU jax a
    staging buffer that an array keeps as its own memory is never reused).

    Args:
        batches: an iterable or async iterable of batches.
        device: a ``jax.Device`` or a sharding (default: jax's default device).
        depth: batches in flight at most (>= 1).
    """
    return DeviceStream(batches, JaxDevice(device), depth=depth)


def batch_sharding(mesh: Mesh, batch_axes: str | Sequence[str] | None = None) -> NamedSharding:
    """Rows (dimension 0) split over ``batch_axes`` of ``mesh`` (default: all of its axes).

    >>> import jax
    >>> mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    >>> batch_sharding(mesh).spec == PartitionSpec("data")
    True
    """
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh but got {type(mesh).__name__}")
    names = tuple(mesh.axis_names)
    if batch_axes is None:
        axes: tuple[Any, ...] = names
    elif isinstance(batch_axes, str):
        axes = (batch_axes,)
    else:
        axes = tuple(batch_axes)
    unknown = [axis for axis in axes if axis not in names]
    if unknown or not axes:
        raise ValueError(f"batch_axes must name axes of the mesh {names} but got {batch_axes!r}")
    spec = PartitionSpec(axes[0] if len(axes) == 1 else axes)  # type: ignore[no-untyped-call]
    return NamedSharding(mesh, spec)


def _covered_rows(sharding: Sharding, shape: tuple[int, ...]) -> tuple[int, int] | None:
    """Rows ``[start, stop)`` this process's devices hold, or None if not contiguous."""
    rows: set[int] = set()
    for index in sharding.addressable_devices_indices_map(shape).values():
        first = slice(None) if index is None else index[0]  # None: the whole array
        start, stop, _ = first.indices(shape[0])
        rows.update(range(start, stop))
    if not rows:
        return None
    low, high = min(rows), max(rows) + 1
    return (low, high) if len(rows) == high - low else None


def _global_leaf(local: Any, sharding: Sharding, rank: int, world_size: int) -> jax.Array:
    array = np.array(local, copy=True)
    if array.ndim == 0:
        raise ValueError(
            "to_global_array needs arrays whose dimension 0 is the batch but got a "
            f"0-d array ({array!r})"
        )
    rows = array.shape[0]
    global_shape = (rows * world_size, *array.shape[1:])
    covered = _covered_rows(sharding, global_shape)
    expected = (rank * rows, (rank + 1) * rows)
    if covered != expected:
        held = (
            "rows that are not contiguous"
            if covered is None
            else f"rows [{covered[0]}, {covered[1]})"
        )
        raise ValueError(
            f"the sharding must give this process (rank {rank} of {world_size}) the contiguous "
            f"rows [{expected[0]}, {expected[1]}) of the global batch of {global_shape[0]}, "
            f"as RankSlice does, but its devices hold {held}; order the mesh's devices "
            "by process, or pass the RankSlice's rank and world_size"
        )
    result: jax.Array = jax.make_array_from_process_local_data(  # type: ignore[no-untyped-call]
        sharding, array, global_shape
    )
    return result


def to_global_array(
    local: Any,
    sharding: Sharding | Mesh,
    *,
    batch_axes: str | Sequence[str] | None = None,
    rank: int | None = None,
    world_size: int | None = None,
) -> Any:
    """This process's slice of the global batch, assembled into global ``jax.Array``s.

    With ``RankSlice(sampler, rank, world_size)`` each process loads the contiguous rows
    ``[rank*b/R, (rank+1)*b/R)`` of the global batch of ``b`` rows; this puts them on the
    process's devices of ``sharding`` (``jax.make_array_from_process_local_data``) and
    returns arrays of the global shape ``(b, ...)``, as a multi-host ``jax.jit`` step
    takes them. The rows this process's devices hold must be exactly that slice, else
    ``ValueError`` (a mesh whose devices are not ordered by process).

    Every array is one leaf; a pooled batch becomes a dict of its fields and Python
    scalars (``global_step``) are kept. Each array's dimension 0 must be the batch: drop
    or pad ragged fields (``ImageBatch.targets``) first.

    Args:
        local: a numpy array, or a batch of them nested as ``to_jax`` allows.
        sharding: the global arrays' sharding, or a mesh (rows split over ``batch_axes``).
        batch_axes: with a mesh, its axes that split the rows (default: all of them).
        rank: this process's rank in the ``RankSlice`` (default ``jax.process_index()``).
        world_size: number of ranks (default ``jax.process_count()``).
    """
    if isinstance(sharding, Mesh):
        sharding = batch_sharding(sharding, batch_axes)
    elif not isinstance(sharding, Sharding):
        raise TypeError(
            "sharding must be a jax.sharding.Sharding or a jax.sharding.Mesh but got "
            f"{type(sharding).__name__}"
        )
    elif batch_axes is not None:
        raise ValueError(f"batch_axes applies to a Mesh only but got {batch_axes!r}")
    world = jax.process_count() if world_size is None else as_int("world_size", world_size)
    if world < 1:
        raise ValueError(f"world_size must be an integer >= 1 but got {world}")
    number = jax.process_index() if rank is None else as_int("rank", rank)
    if not 0 <= number < world:
        raise ValueError(
            f"rank must be an integer in [0, world_size) = [0, {world}) but got {number}"
        )
    target = sharding

    def assemble(value: Any) -> jax.Array:
        return _global_leaf(value, target, number, world)

    return _convert(local, assemble)


__all__ = ("batch_sharding", "to_device_stream", "to_global_array", "to_jax")
