"""``JaxDevice``: the device protocol on jax (``jax.device_put`` from reused host buffers).

jax allocates its own transfer memory, so staging buffers are plain host memory, reused
once the arrays put from them are ready. On CPU jax, ``device_put`` may keep (alias) a
64-byte-aligned host buffer as the array's own memory: that buffer then belongs to the
array and is never reused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import numpy.typing as npt
from jax.sharding import Sharding


@dataclass(eq=False, slots=True)
class JaxStaging:
    """A host buffer, and whether an array put from it kept it as its own memory."""

    array: npt.NDArray[Any]
    given_away: bool = False


def _aliases(value: jax.Array, host: npt.NDArray[Any]) -> bool:
    low = int(host.ctypes.data)
    high = low + host.nbytes
    for shard in value.addressable_shards:
        pointer = int(shard.data.unsafe_buffer_pointer())
        if low <= pointer < high or (host.nbytes == 0 and pointer == low):
            return True
    return False


class JaxDevice:
    """The device protocol for jax.

    Args:
        device: a ``jax.Device`` or a sharding for ``jax.device_put`` (default: jax's
            default device).
    """

    def __init__(self, device: jax.Device | Sharding | None = None) -> None:
        if device is not None and not isinstance(device, (jax.Device, Sharding)):
            raise TypeError(
                f"device must be a jax.Device, a jax.sharding.Sharding or None but got "
                f"{type(device).__name__}"
            )
        self.device = device
        self.name = str(jax.devices()[0] if device is None else device)
        self._unrecorded: list[jax.Array] = []

    def alloc_staging(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> JaxStaging:
        """A host buffer."""
        return JaxStaging(np.empty(shape, dtype))

    def fill(self, staging: JaxStaging, array: npt.NDArray[Any]) -> None:
        """Copy ``array`` into the buffer."""
        np.copyto(staging.array, array)

    def register(self, address: int, size: int) -> bool:
        """jax cannot page-lock memory in place: every array is staged."""
        return False

    def unregister(self, address: int) -> None:
        """Nothing was registered."""

    def copy_async(self, source: JaxStaging) -> jax.Array:
        """``jax.device_put`` of the buffer (asynchronous where jax makes it so)."""
        value: jax.Array = jax.device_put(source.array, self.device)
        if _aliases(value, source.array):
            source.given_away = True
        self._unrecorded.append(value)
        return value

    def record(self) -> tuple[jax.Array, ...]:
        """The arrays put since the last record: ready together means copied."""
        event, self._unrecorded = tuple(self._unrecorded), []
        return event

    def query(self, event: tuple[jax.Array, ...]) -> bool:
        """Whether every array of ``event`` is ready."""
        return all(value.is_ready() for value in event)  # type: ignore[attr-defined]

    def wait(self, event: tuple[jax.Array, ...]) -> None:
        """Block until every array of ``event`` is ready."""
        jax.block_until_ready(event)  # type: ignore[no-untyped-call]

    def hand_over(self, arrays: list[Any], event: Any) -> None:
        """jax orders its own computations after the transfers."""

    def reusable(self, staging: JaxStaging) -> bool:
        """Unless an array kept the buffer as its own memory."""
        return not staging.given_away

    def convert_other(self, value: Any) -> Any | None:
        """A jax array already in the batch, put on the device."""
        if isinstance(value, jax.Array):
            return jax.device_put(value, self.device)
        return None

    def rebuild(self, fields: dict[str, Any]) -> dict[str, Any]:
        """A pooled batch becomes a dict of its fields, a pytree."""
        return dict(fields)


__all__ = ("JaxDevice", "JaxStaging")
