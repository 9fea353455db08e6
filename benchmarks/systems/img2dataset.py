"""img2dataset: ``download`` of a URL list to WebDataset shards, and its outcome read back.

Runs in W7's child process (``benchmarks/workloads/w7_ingest.py``); img2dataset is imported
only when called, so this module imports without it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any


def ingest(spec: dict[str, Any]) -> dict[str, Any]:
    """``img2dataset.download`` of ``spec["url_file"]`` to WebDataset shards; its seconds."""
    os.environ["NO_ALBUMENTATIONS_UPDATE"] = "1"
    from img2dataset import download

    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        download(url_list=spec["url_file"], output_folder=spec["output"],
                 processes_count=spec["processes"], thread_count=spec["threads"],
                 image_size=spec["size"], resize_mode="center_crop",
                 encode_quality=spec["quality"], encode_format="jpg", output_format="webdataset",
                 input_format="txt", number_sample_per_shard=spec["shard_samples"],
                 timeout=spec["timeout"], retries=0, compute_hash=None, extract_exif=False,
                 enable_wandb=False)  # fmt: skip
    return {"seconds": time.perf_counter() - started}


def reason_of_message(message: str) -> str:
    """img2dataset's error message as W7's failure reason (``HTTP 404``, ``timeout``...)."""
    text = message.lower()
    for code in ("404", "503"):
        if f"error {code}" in text or f"http {code}" in text:
            return f"HTTP {code}"
    if "timed out" in text or "timeout" in text:
        return "timeout"
    if "reset" in text or "closed connection" in text or "remote end closed" in text:
        return "reset"
    return message[:60]


def outcome(folder: Path) -> tuple[dict[str, str], list[Path]]:
    """URL -> "ok" or failure reason, and the shard paths, from img2dataset's parquet files."""
    import pyarrow.parquet as pq

    found: dict[str, str] = {}
    for path in sorted(folder.glob("*.parquet")):
        for row in pq.read_table(path, columns=["url", "status", "error_message"]).to_pylist():
            ok = row["status"] == "success"
            found[row["url"]] = "ok" if ok else reason_of_message(row["error_message"] or "")
    return found, sorted(folder.glob("*.tar"))
