"""Read a written shard set back: its manifest, its failure records, its shards.

``open_shards`` builds a ``TarShards`` over the committed shards, in manifest order, with
the indices the writer saved installed where ``TarShards`` looks for them, so no shard is
scanned. Shards the manifest does not list (a killed writer's) are never read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .._errors import MalformedShardError, ObjectNotFoundError
from ..sources import ShardIndex, TarShards, index_json_name, load_index, save_index
from ._destination import Destination, LocalDestination, StoreDestination, make_destination
from ._manifest import FailureRecord, Manifest
from ._tar_writer import MANIFEST_NAME

__all__ = ("open_shards", "read_failures", "read_manifest")


def read_manifest(destination: str | os.PathLike[str] | Destination, store: Any = None) -> Manifest:
    """The manifest of a shard set (a folder, or a prefix of ``store``)."""
    where = make_destination(destination, store)
    text = where.read(MANIFEST_NAME)
    if text is None:
        raise ObjectNotFoundError(f"no manifest at {where.describe(MANIFEST_NAME)}")
    return Manifest.from_json(text)


def read_failures(
    destination: str | os.PathLike[str] | Destination, store: Any = None
) -> list[FailureRecord]:
    """Every failure record of the committed shards, in input order."""
    where = make_destination(destination, store)
    failures: list[FailureRecord] = []
    for record in read_manifest(where).shards:
        if record.failed:
            text = where.read(record.failures_name)
            if text is None:
                raise ObjectNotFoundError(
                    f"shard {record.name!r} lists {record.failed} failures but "
                    f"{where.describe(record.failures_name)} is missing"
                )
            failures.extend(
                FailureRecord.from_dict(json.loads(line)) for line in text.decode().splitlines()
            )
    return failures


def _saved_index(where: Destination, name: str, size: int) -> ShardIndex:
    text = where.read(f"{name}.index.json")
    if text is None:
        raise ObjectNotFoundError(f"the index {where.describe(name + '.index.json')} is missing")
    index = ShardIndex.from_json(text.decode())
    if index.size != size:
        raise MalformedShardError(
            f"shard {where.describe(name)} has {size} bytes but its saved index says "
            f"{index.size}: it changed after it was committed"
        )
    return index


def open_shards(
    destination: str | os.PathLike[str] | Destination,
    store: Any = None,
    *,
    index_dir: str | os.PathLike[str] | None = None,
    **options: Any,
) -> TarShards[Any]:
    """A ``TarShards`` over the committed shards, reusing the indices the writer saved.

    Args:
        destination: The writer's destination: a folder, or a key prefix of ``store``.
        store: The obstore store the shards are in; None for a local folder.
        index_dir: Where ``TarShards`` keeps indices: the folder itself by default for
            local shards; for a store, a local folder (None: shards are indexed by reading
            their headers, as ``TarShards`` does on its own).
        options: Passed on to ``TarShards`` (``decode``, ``max_concurrency``, ...).
    """
    where = make_destination(destination, store)
    manifest = read_manifest(where)
    if not manifest.shards:
        raise ValueError(f"the manifest at {where.describe(MANIFEST_NAME)} lists no shards")
    if isinstance(where, LocalDestination):
        folder = Path(index_dir) if index_dir is not None else where.folder
        paths = [os.path.abspath(where.path(name)) for name in manifest.names]
        for name, path in zip(manifest.names, paths, strict=True):
            stat = os.stat(path)
            tag = f"mtime_ns={stat.st_mtime_ns}"
            _install(folder / index_json_name(path, path), path, stat.st_size, tag, where, name)
        return TarShards(paths, index_dir=folder, **options)
    if not isinstance(where, StoreDestination):
        raise TypeError(f"open_shards reads local folders and stores but got {where!r}")
    keys = [where.key(name) for name in manifest.names]
    if index_dir is not None:
        import obstore

        for name, key in zip(manifest.names, keys, strict=True):
            meta = obstore.head(where.store, key)
            tag = str(meta.get("e_tag") or meta.get("last_modified", ""))
            identity = f"{where.store!r}/{key}"
            saved = Path(index_dir) / index_json_name(key, identity)
            _install(saved, key, int(meta["size"]), tag, where, name)
    return TarShards(keys, where.store, index_dir=index_dir, **options)


def _install(saved: Path, shard: str, size: int, tag: str, where: Destination, name: str) -> None:
    if load_index(saved, shard, size, tag) is not None:
        return
    index = _saved_index(where, name, size)
    save_index(saved, ShardIndex(shard, size, tag, index.samples))
