"""The compiled batch kernels: numba, ``nogil``, cached on disk; compiling, loading, choosing.

The core holds the numpy reference of every batch kernel and calls a compiled one when
this unit says it is to run (the core's kernel slot); the core never imports this unit.
Importing it fills that slot (``import aioloader`` does), so the compiled kernels run
wherever the core builds a batch. Here live the kernels' numba source (``_batch``,
``_image_chain``, on the raw-memory probes of ``_support``), the child process that fills
numba's cache under a lock file (``_cache``) and the choice between the compiled kernels
and numpy (``_selection``: ``AIOLOADER_KERNELS``, ``use_kernels``, loading in a thread of
the engine's, never on an event loop's thread).
"""

from ..core import install_kernels
from ._selection import CHOICES as CHOICES
from ._selection import active as active
from ._selection import chosen as chosen
from ._selection import compiled as compiled
from ._selection import compiled_image_chain as compiled_image_chain
from ._selection import compiles as compiles
from ._selection import failure as failure
from ._selection import filler_pid as filler_pid
from ._selection import load as load
from ._selection import load_kernels as load_kernels
from ._selection import loading_elsewhere as loading_elsewhere
from ._selection import settled as settled
from ._selection import to_load as to_load
from ._selection import use_kernels as use_kernels

install_kernels(compiled, compiled_image_chain, load_kernels)

__all__ = (
    "CHOICES",
    "active",
    "chosen",
    "compiled",
    "compiled_image_chain",
    "compiles",
    "failure",
    "filler_pid",
    "load",
    "load_kernels",
    "loading_elsewhere",
    "settled",
    "to_load",
    "use_kernels",
)
