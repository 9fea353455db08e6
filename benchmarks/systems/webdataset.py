"""WebDataset: tar shards read over presigned http URLs, in a torch ``DataLoader``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from systems.s3spec import Collate, Work, storage_options


def batches(spec: dict[str, Any], work: Work, collate: Collate, skip: int = 0) -> Iterator[Any]:
    """One epoch: shard shuffle, ``shuffle(1000)``, ``work``, ``batched``; no resume.

    ``skip`` drops that many samples (split over the workers) before the per-sample work,
    after downloading them.
    """
    import boto3
    import torch
    import webdataset as wds
    from botocore.config import Config

    config = Config(signature_version="s3v4", s3={"addressing_style": "path"})
    client = boto3.client("s3", **storage_options(spec), config=config)
    urls = [
        client.generate_presigned_url(
            "get_object", Params={"Bucket": spec["bucket"], "Key": key}, ExpiresIn=7200
        )
        for key in spec["keys"]
    ]
    per_worker = skip // max(spec["workers"], 1)

    def skip_first(source: Iterable[Any]) -> Iterator[Any]:
        for position, sample in enumerate(source):
            if position >= per_worker:
                yield sample

    pipeline = wds.WebDataset(urls, shardshuffle=len(urls), seed=spec["seed"], empty_check=False)
    pipeline = pipeline.shuffle(1000)
    if per_worker:
        pipeline = pipeline.compose(skip_first)
    pipeline = pipeline.map(lambda s: work(s["jpg"], s["cls"], s["id"]))
    pipeline = pipeline.batched(spec["batch"], collation_fn=collate, partial=True)
    workers = spec["workers"]
    prefetch = 4 if workers else None
    yield from torch.utils.data.DataLoader(
        pipeline, batch_size=None, num_workers=workers, prefetch_factor=prefetch
    )
