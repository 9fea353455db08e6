"""MosaicML Streaming: ``StreamingDataset`` over MDS shards on S3, in ``StreamingDataLoader``."""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from systems.s3spec import Collate, Work


def _stub(name: str, **attrs: Any) -> None:
    """An empty module ``name`` (and parents) holding ``attrs``."""
    parent = None
    for part in name.split("."):
        path = f"{parent.__name__}.{part}" if parent else part
        module = sys.modules.setdefault(path, types.ModuleType(path))
        if parent is not None:
            setattr(parent, part, module)
        parent = module
    vars(parent).update(attrs)


def import_streaming() -> Any:
    """``import streaming``, stubbing the torchvision and transformers names it imports but never
    uses here (torch 2.13's only torchvision wheels are CUDA builds: Mosaic comes ``--no-deps``)."""
    if "streaming" in sys.modules:  # (find_spec would fail on the stubs)
        return sys.modules["streaming"]
    if importlib.util.find_spec("transformers") is None:
        feature, encoding = type("BatchFeature", (dict,), {}), type("BatchEncoding", (dict,), {})
        _stub("transformers.feature_extraction_utils", BatchFeature=feature)
        _stub("transformers.tokenization_utils_base", BatchEncoding=encoding)
        _stub("transformers.models.auto.tokenization_auto", AutoTokenizer=object)
    if importlib.util.find_spec("torchvision") is None:
        _stub("torchvision.datasets", VisionDataset=type("VisionDataset", (), {}), CIFAR10=object)
        _stub("torchvision.transforms.functional", to_tensor=lambda x: x)
    import streaming

    return streaming


def write(out: Path, samples: Iterable[dict[str, Any]], chunk_bytes: int) -> None:
    """MDS shards of at most ``chunk_bytes`` holding ``{"jpg", "label", "id"}`` samples."""
    columns = {"jpg": "bytes", "label": "int", "id": "int"}
    with import_streaming().MDSWriter(out=str(out), columns=columns, size_limit=chunk_bytes) as mds:
        for sample in samples:
            mds.write(sample)


def worker_init(_: int) -> None:
    """Drop the boto3 client a torch worker inherited over fork (else workers stall)."""
    import torch

    info = torch.utils.data.get_worker_info()
    for stream in info.dataset.streams if info is not None else ():
        stream._downloader.clean_up()


def loader(
    spec: dict[str, Any], cache: Path, work: Work, collate: Collate, cache_bytes: int | None = None
) -> Any:
    """A shuffled loader, ``work`` in ``__getitem__``, local cache of ``cache_bytes`` at most."""
    streaming = import_streaming()
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()

    class Images(streaming.StreamingDataset):  # type: ignore[misc, name-defined]
        def __getitem__(self, index: int) -> Any:
            sample = super().__getitem__(index)
            return work(sample["jpg"], sample["label"], sample["id"])

    dataset = Images(
        remote=f"s3://{spec['bucket']}/{spec['prefix']}",
        local=str(cache),
        shuffle=True,
        shuffle_seed=spec["seed"],
        batch_size=spec["batch"],
        **({} if cache_bytes is None else {"cache_limit": cache_bytes}),
    )
    return streaming.StreamingDataLoader(
        dataset,
        batch_size=spec["batch"],
        num_workers=spec["workers"],
        collate_fn=collate,
        worker_init_fn=worker_init,
    )
