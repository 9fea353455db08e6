"""Loader configurations named on the command line: a JSON file or a Python file.

JSON: ``{"workload": "line-images", "seed": 0, "batch_size": 128, "sampler": "shuffled",
"width_multiple": 4, "augment": true, "count": 2048}`` (every key optional).
Python: a file defining ``make_loader(*, workers: int, prefetch: int) -> DataLoader``.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .core._samplers import SequentialSampler, ShuffledSampler
from .engine._loader import DataLoader
from .testing import line_images

LoaderFactory = Callable[..., DataLoader[Any, Any]]

JSON_KEYS = {"workload", "seed", "batch_size", "sampler", "width_multiple", "augment", "count"}


def load_factory(path: str | None) -> LoaderFactory:
    """A ``make_loader(workers=..., prefetch=...)`` for the config at ``path`` (None: demo)."""
    if path is None:
        return _json_factory({})
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"config must be an existing .json or .py file but got {path!r}")
    if file.suffix == ".py":
        spec = importlib.util.spec_from_file_location("aioloader_user_config", file)
        if spec is None or spec.loader is None:
            raise ValueError(f"config {path!r} cannot be imported")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        factory = getattr(module, "make_loader", None)
        if not callable(factory):
            raise ValueError(f"config {path!r} must define make_loader(*, workers, prefetch)")
        return factory  # type: ignore[no-any-return]
    if file.suffix == ".json":
        try:
            data = json.loads(file.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"config {path!r} is not valid JSON: {error}") from None
        if not isinstance(data, dict):
            raise ValueError(
                f"config {path!r} must hold a JSON object but got {type(data).__name__}"
            )
        return _json_factory(data)
    raise ValueError(f"config must end in .json or .py but got {path!r}")


def _json_factory(data: dict[str, Any]) -> LoaderFactory:
    unknown = set(data) - JSON_KEYS
    if unknown:
        raise ValueError(f"config keys must be among {sorted(JSON_KEYS)} but got {sorted(unknown)}")
    if data.get("workload", "line-images") != "line-images":
        raise ValueError(f"workload must be 'line-images' but got {data['workload']!r}")
    sampler_kind = data.get("sampler", "shuffled")
    if sampler_kind not in ("shuffled", "sequential"):
        raise ValueError(f"sampler must be 'shuffled' or 'sequential' but got {sampler_kind!r}")
    count = int(data.get("count", 2048))
    batch_size = int(data.get("batch_size", 128))
    seed = int(data.get("seed", 0))
    width_multiple = int(data.get("width_multiple", 4))
    augment = bool(data.get("augment", True))

    def make_loader(*, workers: int, prefetch: int) -> DataLoader[Any, Any]:
        from .core._images import GainOffset, ImageBatchCollator

        sampler_type = ShuffledSampler if sampler_kind == "shuffled" else SequentialSampler
        return DataLoader(
            line_images(count),
            sampler_type(count, batch_size),
            ImageBatchCollator(width_multiple, augment=GainOffset() if augment else None),
            seed=seed,
            workers=workers,
            prefetch=prefetch,
        )

    return make_loader
