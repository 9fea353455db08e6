"""LitData: ``StreamingDataset`` over optimized chunks on S3, in its ``StreamingDataLoader``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from systems.s3spec import Collate, Work, storage_options


def loader(
    spec: dict[str, Any], cache: Path, work: Work, collate: Collate, cache_bytes: int | None = None
) -> Any:
    """A shuffled loader whose ``transform`` runs ``work``; ``cache_bytes``: ``max_cache_size``.

    Its obstore client options get ``allow_http`` (loopback is plain http; real S3 is https).
    """
    import litdata
    from litdata.streaming import downloader

    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True  # type: ignore[index]
    limit = {} if cache_bytes is None else {"max_cache_size": cache_bytes}
    dataset = litdata.StreamingDataset(
        f"s3://{spec['bucket']}/{spec['prefix']}",
        cache_dir=str(cache),
        shuffle=True,
        seed=spec["seed"],
        storage_options=storage_options(spec),
        transform=lambda s: work(s["jpg"], s["label"], s["id"]),
        **limit,
    )
    return litdata.StreamingDataLoader(
        dataset, batch_size=spec["batch"], num_workers=spec["workers"], collate_fn=collate
    )
