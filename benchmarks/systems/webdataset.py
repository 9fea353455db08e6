"""WebDataset: tar shards read over presigned http URLs, in a torch ``DataLoader``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from systems.s3spec import Collate, Work


def presigned(spec: dict[str, Any], keys: list[str]) -> list[str]:
    """Presigned GET URLs of ``keys`` (WebDataset reads plain URLs)."""
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=spec["endpoint"],
        aws_access_key_id=spec["access_key_id"],
        aws_secret_access_key=spec["secret_access_key"],
        region_name=spec["region"],
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    return [
        client.generate_presigned_url(
            "get_object", Params={"Bucket": spec["bucket"], "Key": key}, ExpiresIn=7200
        )
        for key in keys
    ]


def batches(
    spec: dict[str, Any], work: Work, collate: Collate, skip: int = 0
) -> Iterator[dict[str, Any]]:
    """One epoch: shard shuffle, ``shuffle(1000)``, ``work``, ``batched``; no resume.

    ``skip`` drops that many samples (split over the workers) before the per-sample work:
    they are still downloaded.
    """
    import torch
    import webdataset as wds

    urls = presigned(spec, spec["keys"])
    workers = spec["workers"]
    per_worker = skip // max(workers, 1)

    def skip_first(source: Iterable[Any]) -> Iterator[Any]:
        for position, sample in enumerate(source):
            if position >= per_worker:
                yield sample

    pipeline = wds.WebDataset(
        urls, shardshuffle=len(urls), seed=spec["seed"], empty_check=False
    ).shuffle(1000)
    if per_worker:
        pipeline = pipeline.compose(skip_first)
    pipeline = pipeline.map(lambda s: work(s["jpg"], s["cls"], s["id"])).batched(
        spec["batch"], collation_fn=collate, partial=True
    )
    loader = torch.utils.data.DataLoader(
        pipeline,
        batch_size=None,
        num_workers=workers,
        prefetch_factor=4 if workers else None,
    )
    yield from loader
