"""Interop with frameworks: rank resolution and the device feed's framework-free parts
here (``DeviceStream``, ``FakeDevice`` for tests); ``aioloader.interop.torch`` and
``aioloader.interop.jax`` when imported by name (each imports its framework).

The framework modules import their framework, so they are never imported from here.
"""

from ._device import DeviceBackend as DeviceBackend
from ._device import DeviceStatistics as DeviceStatistics
from ._device_stream import DeviceStream as DeviceStream
from ._fake_device import FakeDevice as FakeDevice
from ._ranks import RankInfo as RankInfo
from ._ranks import rank_slice as rank_slice
from ._ranks import resolve_rank as resolve_rank

__all__ = (
    "DeviceBackend",
    "DeviceStatistics",
    "DeviceStream",
    "FakeDevice",
    "RankInfo",
    "rank_slice",
    "resolve_rank",
)
