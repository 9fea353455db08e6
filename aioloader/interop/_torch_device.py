"""``TorchDevice``: the device protocol on torch, CUDA with a side stream, or the CPU.

On ``"cpu"`` the same code runs without page-locking, streams or events (a copy is done
when ``copy_async`` returns), so every line but the CUDA calls is exercised on a CPU.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ..core import instance_not_bool
from ._walk import TensorBatch


@dataclass(eq=False, slots=True)
class TorchStaging:
    """A staging tensor (page-locked on CUDA) and the numpy view the host writes."""

    tensor: torch.Tensor
    array: npt.NDArray[Any]


def torch_dtype(dtype: np.dtype[Any]) -> torch.dtype:
    """The torch dtype of a numpy dtype; ``TypeError`` naming it when torch has none."""
    try:
        return torch.from_numpy(np.empty(0, dtype)).dtype
    except TypeError:
        raise TypeError(
            f"batch arrays must have a dtype torch supports to go to a device but got {dtype}"
        ) from None


def resolve_device(device: torch.device | str | int) -> torch.device:
    """``device`` as a ``torch.device`` the feed can serve, or an error that says why not."""
    instance_not_bool("device", device, (torch.device, str, int), "a torch.device, a str or an int")
    try:
        target = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"device must name a torch device but got {device!r}: {error}") from None
    if target.type == "cpu":
        return target
    if target.type != "cuda":
        raise ValueError(
            f"device must be a CUDA device ('cuda', 'cuda:N') or 'cpu' but got {device!r}"
        )
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"device must be an available CUDA device but got {device!r} and "
            f"torch.cuda.is_available() is False (torch {torch.__version__}); pass "
            "device='cpu' to run the same path on the CPU"
        )
    return _cuda_device(target, device)


def _cuda_device(  # pragma: no cover - needs CUDA
    target: torch.device, device: Any
) -> torch.device:
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if target.index is None else target.index
    if not 0 <= index < count:
        raise ValueError(
            f"device must be one of the {count} CUDA devices (cuda:0 to cuda:{count - 1}) "
            f"but got {device!r}"
        )
    return torch.device("cuda", index)


class TorchDevice:
    """The device protocol for torch: pinned staging, a side stream, CUDA events.

    Args:
        device: ``"cuda"``, ``"cuda:N"``, a ``torch.device`` or ``"cpu"``.
    """

    def __init__(self, device: torch.device | str | int) -> None:
        self.device = resolve_device(device)
        self.name = str(self.device)
        self._cuda = self.device.type == "cuda"
        self._stream: Any = None
        if self._cuda:  # pragma: no cover - needs CUDA
            self._stream = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]

    def _side_stream(self) -> contextlib.AbstractContextManager[Any]:
        if self._stream is not None:  # pragma: no cover - needs CUDA
            return torch.cuda.stream(self._stream)
        return contextlib.nullcontext()

    def alloc_staging(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> TorchStaging:
        """A staging tensor, page-locked when the device is CUDA."""
        tensor = torch.empty(shape, dtype=torch_dtype(dtype), pin_memory=self._cuda)
        return TorchStaging(tensor, tensor.numpy())

    def fill(self, staging: TorchStaging, array: npt.NDArray[Any]) -> None:
        """Copy ``array`` into the staging tensor's memory."""
        np.copyto(staging.array, array)

    def register(self, address: int, size: int) -> bool:
        """Page-lock mapped memory in place (``cudaHostRegister``); on the CPU there is
        nothing to lock and copies read it as it is."""
        if self._cuda:  # pragma: no cover - needs CUDA
            cudart: Any = torch.cuda.cudart()  # type: ignore[no-untyped-call]
            return int(cudart.cudaHostRegister(address, size, 0)) == 0
        return True

    def unregister(self, address: int) -> None:
        """Undo ``register``."""
        if self._cuda:  # pragma: no cover - needs CUDA
            cudart: Any = torch.cuda.cudart()  # type: ignore[no-untyped-call]
            cudart.cudaHostUnregister(address)

    def copy_async(self, source: TorchStaging | npt.NDArray[Any]) -> torch.Tensor:
        """A new tensor on the device; on CUDA the copy is enqueued on the side stream."""
        tensor = source.tensor if isinstance(source, TorchStaging) else torch.from_numpy(source)
        with self._side_stream():
            return tensor.to(self.device, non_blocking=self._cuda, copy=True)

    def record(self) -> Any:
        """A CUDA event after the side stream's copies (None on the CPU: copies are done)."""
        event = None
        if self._cuda:  # pragma: no cover - needs CUDA
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(self._stream)
        return event

    def query(self, event: Any) -> bool:
        """Whether the copies before ``event`` have completed."""
        return event is None or bool(event.query())

    def wait(self, event: Any) -> None:
        """Block until the copies before ``event`` have completed."""
        if event is not None:  # pragma: no cover - needs CUDA
            event.synchronize()

    def hand_over(self, arrays: list[Any], event: Any) -> None:
        """Order the consumer's stream after the copy; tell the caching allocator that the
        consumer's stream uses tensors allocated on the side stream."""
        if event is not None:  # pragma: no cover - needs CUDA
            consumer = torch.cuda.current_stream(self.device)
            consumer.wait_event(event)
            for tensor in arrays:
                tensor.record_stream(consumer)

    def reusable(self, staging: TorchStaging) -> bool:
        """Always: a device tensor never keeps its staging tensor."""
        return True

    def convert_other(self, value: Any) -> Any | None:
        """A tensor already in the batch, copied to the device (a new tensor)."""
        if isinstance(value, torch.Tensor):
            return value.to(self.device, copy=True)
        return None

    def rebuild(self, fields: dict[str, Any]) -> TensorBatch:
        """A pooled batch becomes a ``TensorBatch``."""
        return TensorBatch(**fields)


__all__ = ("TorchDevice", "TorchStaging", "resolve_device", "torch_dtype")
