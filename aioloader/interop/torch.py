"""PyTorch interop: batches as tensors without copies, device transfer, and an IterableDataset.

Importing this module imports torch; nothing else in aioloader does.

>>> import numpy as np
>>> array = np.arange(6, dtype=np.float32)
>>> to_torch({"x": array})["x"].data_ptr() == array.ctypes.data
True
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.utils.data

from ..core import u64
from ._device_stream import DeviceStream
from ._torch_device import TorchDevice
from ._walk import TensorBatch as TensorBatch
from ._walk import map_batch


def _array_to_tensor(array: np.ndarray[Any, Any]) -> torch.Tensor:
    # torch.from_numpy shares memory; it cannot take negative strides and must not be given
    # a read-only array (writes through the tensor would be undefined), so those are copied.
    if not array.flags.writeable or any(stride < 0 for stride in array.strides):
        array = np.array(array, copy=True)
    return torch.from_numpy(array)


def _convert(obj: Any, leaf: Any) -> Any:
    def convert_leaf(value: Any) -> Any | None:
        if isinstance(value, np.ndarray):
            return leaf(_array_to_tensor(value))
        if isinstance(value, torch.Tensor):
            return leaf(value)
        if isinstance(value, np.generic):
            return leaf(_array_to_tensor(np.array(value)))
        return None

    # a pooled batch: its tensors share its buffers through exported views, which keep
    # the buffers out of the pool (even after release) until every such tensor is gone
    return map_batch(obj, convert_leaf, lambda fields: TensorBatch(**fields), share=True)


def _same(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def to_torch(batch: Any) -> Any:
    """``batch`` with every numpy array replaced by a tensor that shares its memory.

    An aioloader batch (``ImageBatch`` and the other pooled batches) becomes a
    ``TensorBatch`` whose tensors share the batch's buffers. They stay valid after
    ``release()``: the buffers go back to the pool only once every tensor that shares
    them (views and slices included) has been garbage-collected, so no later batch is
    ever built into them.

    Walks dataclasses (rebuilt with ``dataclasses.replace``), dicts, tuples, namedtuples
    and lists; numpy scalars become 0-d tensors; anything else is kept as it is. Arrays
    that ``torch.from_numpy`` cannot share (read-only, negative strides) are copied.
    """
    return _convert(batch, _same)


def _accelerator_available() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        return bool(accelerator.is_available())
    return bool(torch.cuda.is_available())  # pragma: no cover - torch < 2.6


def to_device(
    batch: Any,
    device: torch.device | str | int,
    *,
    non_blocking: bool = True,
    pin_memory: bool = False,
) -> Any:
    """``to_torch(batch)`` with every tensor moved to ``device``.

    Tensors already on ``device`` are not copied, so ``to_device(batch, "cpu")`` shares
    the batch's memory. With ``pin_memory`` each tensor is first copied into page-locked
    host memory, which lets ``non_blocking`` copies to an accelerator overlap compute;
    it requires an accelerator and raises ``RuntimeError`` when none is available
    (pinning for nothing would only add a copy).

    Args:
        batch: a batch of numpy arrays and/or tensors, nested as ``to_torch`` allows.
        device: where the tensors go (``"cuda"``, ``"cuda:1"``, ``torch.device(...)``).
        non_blocking: asynchronous copies where the source is pinned memory.
        pin_memory: pin host tensors before the transfer.
    """
    target = torch.device(device)
    if pin_memory and not _accelerator_available():
        raise RuntimeError(
            "pin_memory=True requires an accelerator but torch finds none "
            "(torch.accelerator.is_available() is False); use pin_memory=False"
        )

    def move(tensor: torch.Tensor) -> torch.Tensor:
        if pin_memory and tensor.device.type == "cpu" and not tensor.is_pinned():
            tensor = tensor.pin_memory()
        return tensor.to(target, non_blocking=non_blocking)

    return _convert(batch, move)


def to_device_stream(
    batches: Any, device: torch.device | str | int, *, depth: int = 2
) -> DeviceStream:
    """Batches of ``batches`` as tensors on ``device``: ``for`` or ``async for`` over it.

    One line feeds an accelerator::

        for batch in to_device_stream(loader.iter_sync(), "cuda"): ...
        async for batch in to_device_stream(loader, "cuda"): ...

    Each numpy array is written into a pooled page-locked staging buffer (one per
    ``(shape, dtype)``, reused batch after batch), or read in place when it lies in a
    process worker's shared memory (registered with ``cudaHostRegister`` once per mapping
    and unregistered at ``close()``). Copies run on a side CUDA stream while the consumer
    computes, up to ``depth`` batches ahead; a batch is handed over once its copy has
    completed, and the consumer's current stream is ordered after it. The host batch is
    released as soon as its bytes are staged. Tensors handed over are new allocations:
    nothing overwrites them. A pooled batch becomes a ``TensorBatch``; containers are kept
    as ``to_torch`` keeps them.

    ``device="cpu"`` runs the same path on the CPU (fresh tensors, no pinning, no streams).

    Args:
        batches: an iterable (``for``) or async iterable (``async for``) of batches.
        device: ``"cuda"``, ``"cuda:N"``, a ``torch.device``, or ``"cpu"``.
        depth: batches in flight at most (>= 1).

    Raises:
        RuntimeError: ``device`` is CUDA and torch finds none.
    """
    return DeviceStream(batches, TorchDevice(device), depth=depth)


class TorchIterableDataset(torch.utils.data.IterableDataset[Any]):
    """Serves ``loader.iter_sync(start, stop)`` to synchronous PyTorch code, as tensors.

    Use it with ``torch.utils.data.DataLoader(adapter, batch_size=None, num_workers=0)``:
    the aioloader ``DataLoader`` batches, prefetches and runs its own threads, so torch
    must neither re-batch (``batch_size=None``) nor fork workers (more than one worker
    would each serve the whole stream, so ``num_workers > 1`` is refused).
    With ``start=None`` (the default) it serves from the loader's cursor and
    ``loader.state_dict()`` is the checkpoint: it points after the last batch served. An
    explicit ``start`` serves that range and leaves the cursor alone.

    Args:
        loader: an ``aioloader.engine.DataLoader``.
        start: first global step (default: the loader's cursor when iteration begins).
        stop: end global step, excluded (default: no end).
        convert: turn numpy arrays into tensors with ``to_torch`` (default True).
    """

    def __init__(
        self,
        loader: Any,
        start: int | None = None,
        stop: int | None = None,
        *,
        convert: bool = True,
    ) -> None:
        super().__init__()
        if not callable(getattr(loader, "iter_sync", None)):
            raise TypeError(
                f"loader must be an aioloader DataLoader (with iter_sync) but got "
                f"{type(loader).__name__}"
            )
        self.loader = loader
        self.start = None if start is None else u64("start", start)
        self.stop = None if stop is None else u64("stop", stop)
        if self.start is not None and self.stop is not None and self.stop < self.start:
            raise ValueError(f"stop must be >= start ({self.start}) but got {self.stop}")
        self.convert = convert

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise RuntimeError(
                "TorchIterableDataset must be read by at most one torch worker but got "
                f"num_workers={info.num_workers}; use num_workers=0 (aioloader runs its "
                "own prefetching and threads)"
            )
        return self._serve()

    def _serve(self) -> Iterator[Any]:
        batches = self.loader.iter_sync(self.start, self.stop)
        try:
            for batch in batches:
                yield to_torch(batch) if self.convert else batch
        finally:
            batches.close()  # stops the loader's event-loop thread at once, not at GC

    def __len__(self) -> int:
        if self.stop is None:
            raise TypeError("len() of an endless TorchIterableDataset (stop is None)")
        start = self.loader.next_step if self.start is None else self.start
        return max(0, self.stop - start)


__all__ = ("TensorBatch", "TorchIterableDataset", "to_device", "to_device_stream", "to_torch")
