"""Loader configurations named on the command line: a JSON file or a Python file.

JSON: ``{"workload": "line-images", "seed": 0, "batch_size": 128, "sampler": "shuffled",
"width_multiple": 4, "augment": true, "count": 2048}`` (every key optional; the values
shown are the defaults, which are the demo's workload).
Python: a file defining ``make_loader(*, workers: int, prefetch: int) -> DataLoader``. Its
folder is on ``sys.path`` while it is imported and while ``make_loader`` runs, so it may
import the modules beside it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core import SequentialSampler, ShuffledSampler, at_least
from ..engine import DataLoader

LoaderFactory = Callable[..., DataLoader[Any, Any]]

DEFAULTS: dict[str, Any] = {
    "workload": "line-images",
    "seed": 0,
    "batch_size": 128,
    "sampler": "shuffled",
    "width_multiple": 4,
    "augment": True,
    "count": 2048,
}
JSON_KEYS = frozenset(DEFAULTS)

CONFIG_HELP = (
    "CONFIG is a .json file with any of the keys "
    + ", ".join(f"{key} (default {json.dumps(value)})" for key, value in DEFAULTS.items())
    + "; or a .py file defining make_loader(*, workers, prefetch) that returns a DataLoader. "
    "Without CONFIG: the demo's workload."
)


def add_config_argument(parser: Any) -> None:
    """Add the optional positional ``CONFIG`` (``CONFIG_HELP`` says what it may be)."""
    parser.add_argument("config", nargs="?", metavar="CONFIG", help=".json or .py config")


def load_factory(path: str | None) -> LoaderFactory:
    """A ``make_loader(workers=..., prefetch=...)`` for the config at ``path`` (None: demo).

    Raises:
        ValueError: The file is missing, of another kind, or holds a bad config; the
            message names the file and what is wrong.
    """
    if path is None:
        return _json_factory({}, "the demo config")
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"config must be an existing .json or .py file but got {path!r}")
    if file.suffix == ".py":
        return _python_factory(file)
    if file.suffix == ".json":
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"config {path!r} is not valid JSON: {error}") from None
        if not isinstance(data, dict):
            raise ValueError(
                f"config {path!r} must hold a JSON object but got {type(data).__name__}"
            )
        return _json_factory(data, f"config {path!r}")
    raise ValueError(f"config must end in .json or .py but got {path!r}")


def _python_factory(file: Path) -> LoaderFactory:
    spec = importlib.util.spec_from_file_location("aioloader_user_config", file)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has one
        raise ValueError(f"config {str(file)!r} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    try:
        with _on_path(file.parent):
            spec.loader.exec_module(module)
    except Exception as error:
        raise ValueError(
            f"config {str(file)!r} failed to import: {type(error).__name__}: {error}"
        ) from error
    factory = getattr(module, "make_loader", None)
    if not callable(factory):
        raise ValueError(  # noqa: TRY004 - a bad config is a bad value for the user
            f"config {str(file)!r} must define make_loader(*, workers, prefetch)"
        )

    def make_loader(*, workers: int, prefetch: int) -> DataLoader[Any, Any]:
        with _on_path(file.parent):
            loader = factory(workers=workers, prefetch=prefetch)
        if not isinstance(loader, DataLoader):
            raise ValueError(  # noqa: TRY004 - a bad config is a bad value for the user
                f"config {str(file)!r}: make_loader(workers={workers}, prefetch={prefetch}) "
                f"must return an aioloader DataLoader but returned "
                f"{type(loader).__name__} {_short_repr(loader)}"
            )
        return loader

    return make_loader


@contextlib.contextmanager
def _on_path(folder: Path) -> Iterator[None]:
    """``folder`` first on ``sys.path`` inside the block (as ``python config.py`` has it)."""
    entry = str(folder.resolve())
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # the config removed it itself
            sys.path.remove(entry)


def _short_repr(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _integer(data: dict[str, Any], key: str, where: str, minimum: int) -> int:
    try:
        return at_least(f"{where}: {key}", data.get(key, DEFAULTS[key]), minimum)
    except TypeError as error:  # a bad config is a bad value for the user
        raise ValueError(str(error)) from None


def _json_factory(data: dict[str, Any], where: str) -> LoaderFactory:
    unknown = set(data) - JSON_KEYS
    if unknown:
        raise ValueError(
            f"{where}: keys must be among {sorted(JSON_KEYS)} but got {sorted(unknown)}"
        )
    if data.get("workload", "line-images") != "line-images":
        raise ValueError(f"{where}: workload must be 'line-images' but got {data['workload']!r}")
    sampler_kind = data.get("sampler", "shuffled")
    if sampler_kind not in ("shuffled", "sequential"):
        raise ValueError(
            f"{where}: sampler must be 'shuffled' or 'sequential' but got {sampler_kind!r}"
        )
    count = _integer(data, "count", where, 1)
    batch_size = _integer(data, "batch_size", where, 1)
    seed = _integer(data, "seed", where, 0)
    width_multiple = _integer(data, "width_multiple", where, 1)
    augment = data.get("augment", True)
    if not isinstance(augment, bool):
        raise ValueError(f"{where}: augment must be true or false but got {augment!r}")  # noqa: TRY004
    if batch_size > count:
        raise ValueError(f"{where}: batch_size must be <= count ({count}) but got {batch_size}")

    def make_loader(*, workers: int | str, prefetch: int | str) -> DataLoader[Any, Any]:
        from ..core import GainOffset, ImageBatchCollator
        from ..datasets import line_images

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
