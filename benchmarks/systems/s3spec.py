"""The row spec (a JSON dict) every object-storage adapter reads: ``endpoint``, ``bucket``,
``prefix``, ``keys``, ``access_key_id``, ``secret_access_key``, ``region``, ``seed``,
``batch``, ``workers``. Each adapter maps its format's fields onto ``work(jpeg, label, ident)``
and batches the items with ``collate(items)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Work = Callable[[Any, Any, Any], Any]
Collate = Callable[[list[Any]], Any]


def storage_options(spec: dict[str, Any]) -> dict[str, str]:
    """Endpoint and credentials as boto3's keyword arguments (also LitData's storage_options)."""
    return {
        "endpoint_url": spec["endpoint"],
        "aws_access_key_id": spec["access_key_id"],
        "aws_secret_access_key": spec["secret_access_key"],
        "region_name": spec["region"],
    }


def peer_env(spec: dict[str, Any]) -> dict[str, str]:
    """Endpoint and credentials as environment variables (how Mosaic reads them)."""
    return {
        "S3_ENDPOINT_URL": spec["endpoint"],
        "AWS_ACCESS_KEY_ID": spec["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": spec["secret_access_key"],
        "AWS_DEFAULT_REGION": spec["region"],
        "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
        "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
    }
