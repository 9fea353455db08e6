"""One module per workload: ``NAME``, ``TITLE``, ``NOTES``, ``build(quick, log, stack, args)
-> (cases, notes)`` and, where it has targets, ``targets(cases)``. To add a workload: write its
module, add a line to ``MODULES`` (and to ``OPT_IN`` if it runs only when named)."""

from __future__ import annotations

import importlib
from types import ModuleType

# In the order of the reports; cases are built in this order too.
MODULES = {
    "W1": "w1_images",
    "W1U": "w1u_user_code",
    "W1P": "w1p_gil",
    "W2": "w2_object_store",
    "W3": "w3_tokens",
    "W4": "w4_resume",
    "W5": "w5_jpeg",
    "W5J": "w5j_chain",
    "W6": "w6_object_storage",
    "W6L": "w6_large",
    "W7": "w7_ingest",
    "W8": "w8_cache",
    "W9": "w9_feed",
    "W9C": "w9_cpu",
    "W9D": "w9_demo",
}
# long, needing peers installed by hand, or a GPU (W9 and its tables): run only when named
OPT_IN = ("W6", "W6L", "W7", "W8", "W9", "W9C", "W9D")


def load(name: str) -> ModuleType:
    return importlib.import_module(f"workloads.{MODULES[name]}")
