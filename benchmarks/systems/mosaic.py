"""MosaicML Streaming: ``StreamingDataset`` over MDS shards on S3, in ``StreamingDataLoader``."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

from systems.s3spec import Collate, Work


def import_streaming() -> Any:
    """``import streaming`` (MosaicML), with stubs for torchvision and transformers if absent.

    Mosaic's top-level import names a few torchvision and transformers classes that this
    path never uses; the only torchvision wheels for torch 2.13 are CUDA builds, so the
    benchmarks install Mosaic with ``--no-deps`` and stub those names here.
    """

    def stub(name: str, **attrs: Any) -> None:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix not in sys.modules:
                sys.modules[prefix] = types.ModuleType(prefix)
                if i > 1:
                    setattr(
                        sys.modules[".".join(parts[: i - 1])], parts[i - 1], sys.modules[prefix]
                    )
        for key, value in attrs.items():
            setattr(sys.modules[name], key, value)

    if "streaming" in sys.modules:
        return sys.modules["streaming"]
    if importlib.util.find_spec("transformers") is None:
        stub(
            "transformers.feature_extraction_utils", BatchFeature=type("BatchFeature", (dict,), {})
        )
        stub(
            "transformers.tokenization_utils_base", BatchEncoding=type("BatchEncoding", (dict,), {})
        )
        stub("transformers.models.auto.tokenization_auto", AutoTokenizer=object)
    if importlib.util.find_spec("torchvision") is None:
        stub("torchvision.datasets", VisionDataset=type("VisionDataset", (), {}), CIFAR10=object)
        stub("torchvision.transforms.functional", to_tensor=lambda x: x)
    import streaming

    return streaming


def write(out: Path, samples: Any, chunk_bytes: int | None = None) -> None:
    """MDS shards of ``{"jpg", "label", "id"}`` samples (``size_limit=chunk_bytes`` if given)."""
    streaming = import_streaming()
    columns = {"jpg": "bytes", "label": "int", "id": "int"}
    limit = {} if chunk_bytes is None else {"size_limit": chunk_bytes}
    with streaming.MDSWriter(out=str(out), columns=columns, **limit) as writer:
        for sample in samples:
            writer.write(sample)


def worker_init(_: int) -> None:
    """Drop the boto3 client a torch worker inherited over fork (else workers stall)."""
    import torch

    info = torch.utils.data.get_worker_info()
    if info is not None:
        for stream in info.dataset.streams:
            stream._downloader.clean_up()


def loader(
    spec: dict[str, Any], cache: Path, work: Work, collate: Collate, cache_limit: int | None = None
) -> Any:
    """A shuffled ``StreamingDataLoader`` whose dataset runs ``work`` in ``__getitem__``."""
    streaming = import_streaming()
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()

    class Images(streaming.StreamingDataset):  # type: ignore[misc, name-defined]
        def __getitem__(self, index: int) -> Any:
            sample = super().__getitem__(index)
            return work(sample["jpg"], sample["label"], sample["id"])

    limit = {} if cache_limit is None else {"cache_limit": cache_limit}
    dataset = Images(
        remote=f"s3://{spec['bucket']}/{spec['prefix']}",
        local=str(cache),
        shuffle=True,
        shuffle_seed=spec["seed"],
        batch_size=spec["batch"],
        **limit,
    )
    return streaming.StreamingDataLoader(
        dataset,
        batch_size=spec["batch"],
        num_workers=spec["workers"],
        collate_fn=collate,
        worker_init_fn=worker_init,
    )
