"""One walk over a batch's structure, shared by the framework interop modules."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any

import numpy as np

Convert = Callable[[Any], Any]


class TensorBatch(types.SimpleNamespace):
    """The fields of an aioloader batch (``ImageBatch``, ``PaddedBatch``...) as tensors.

    Fields read as attributes (``batch.images``) or items (``batch["images"]``).
    """

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)


def map_batch(
    obj: Any,
    convert_leaf: Callable[[Any], Any | None],
    pooled: Callable[[dict[str, Any]], Any],
    *,
    share: bool = False,
) -> Any:
    """Rebuild ``obj`` with every leaf replaced by ``convert_leaf(leaf)``.

    ``convert_leaf`` returns ``None`` for what is not a leaf. Walks pooled aioloader
    batches (``__batch_fields__``: every field; else ``__digest_fields__``), rebuilt by
    ``pooled(fields)``,
    dataclasses, dicts, namedtuples, tuples and lists; strings and anything else are kept.
    With ``share``, a numpy array inside a pooled batch that offers ``export`` (every
    ``PooledBatch``) reaches ``convert_leaf`` as ``batch.export(array)``: a view that keeps
    the batch's buffers out of its pool while it lives.
    """

    def walk(value: Any, owner: Any) -> Any:
        if isinstance(value, (str, bytes, bytearray)):
            return value
        if owner is not None and isinstance(value, np.ndarray):
            value = owner(value)
        converted = convert_leaf(value)
        if converted is not None:
            return converted
        fields = getattr(value, "__batch_fields__", None) or getattr(
            value, "__digest_fields__", None
        )
        if fields is not None:
            export = getattr(value, "export", None) if share else None
            return pooled({name: walk(field, export) for name, field in fields()})
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes = {
                field.name: walk(getattr(value, field.name), owner)
                for field in dataclasses.fields(value)
                if field.init
            }
            return dataclasses.replace(value, **changes)
        if isinstance(value, dict):
            items = [(key, walk(item, owner)) for key, item in value.items()]
            try:
                return type(value)(items)
            except TypeError:  # a dict subclass with another constructor (defaultdict)
                return dict(items)
        if isinstance(value, tuple):
            values = [walk(item, owner) for item in value]
            if hasattr(value, "_fields"):  # namedtuple
                return type(value)(*values)
            return tuple(values)
        if isinstance(value, list):
            return [walk(item, owner) for item in value]
        return value

    return walk(obj, None)
