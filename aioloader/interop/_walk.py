"""One walk over a batch's structure, shared by the framework interop modules."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

Convert = Callable[[Any], Any]


def map_batch(
    obj: Any,
    convert_leaf: Callable[[Any], Any | None],
    pooled: Callable[[dict[str, Any]], Any],
) -> Any:
    """Rebuild ``obj`` with every leaf replaced by ``convert_leaf(leaf)``.

    ``convert_leaf`` returns ``None`` for what is not a leaf. Walks pooled aioloader
    batches (``__batch_fields__``: every field; else ``__digest_fields__``), rebuilt by
    ``pooled(fields)``,
    dataclasses, dicts, namedtuples, tuples and lists; strings and anything else are kept.
    """

    def walk(value: Any) -> Any:
        if isinstance(value, (str, bytes, bytearray)):
            return value
        converted = convert_leaf(value)
        if converted is not None:
            return converted
        fields = getattr(value, "__batch_fields__", None) or getattr(
            value, "__digest_fields__", None
        )
        if fields is not None:
            return pooled({name: walk(field) for name, field in fields()})
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes = {
                field.name: walk(getattr(value, field.name))
                for field in dataclasses.fields(value)
                if field.init
            }
            return dataclasses.replace(value, **changes)
        if isinstance(value, dict):
            items = [(key, walk(item)) for key, item in value.items()]
            try:
                return type(value)(items)
            except TypeError:  # a dict subclass with another constructor (defaultdict)
                return dict(items)
        if isinstance(value, tuple):
            values = [walk(item) for item in value]
            if hasattr(value, "_fields"):  # namedtuple
                return type(value)(*values)
            return tuple(values)
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    return walk(obj)
