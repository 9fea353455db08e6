"""``aioloader ingest INPUT OUTPUT``: URLs or records in, WebDataset shards out (the
command-line face of ``aioloader.ingest``).

OUTPUT is a local folder, or an object store URL (``s3://bucket/prefix``, ``gs://...``,
``az://...``, ``file:///...``, ``memory:///``) opened with obstore's ``from_url``; store
settings (endpoint, region, credentials) come from the environment as obstore reads them,
or from ``--store-option KEY=VALUE``. Running the same command again after it was
interrupted (even by SIGKILL) resumes where the committed shards end, if the input and the
settings that decide the output are the same (else it stops with an error naming what
changed; ``--allow-appended-input`` accepts an input that only grew at its end).

The command streams its progress (one line per committed shard, then the summary) as it
goes, since a run may last hours; errors still end as one ``error: ...`` line.

Credentials: an ``s3://`` OUTPUT needs credentials given explicitly (``--store-option
access_key_id=... secret_access_key=...`` or ``AWS_ACCESS_KEY_ID`` with
``AWS_SECRET_ACCESS_KEY``, or a web identity / container credentials variable). Without
them the command stops with one clear error instead of letting obstore fall back to the
cloud instance metadata service; ``--instance-credentials`` asks for that fallback (on a
cloud VM with an instance role).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import Any, cast

from ._arguments import BACKENDS, options_named, positive, positive_float, run_backend

__all__ = ("add_parser", "run")

_STORE_SCHEMES = (
    *("s3://", "s3a://", "gs://", "az://", "abfs://", "abfss://"),
    *("file://", "memory://", "adl://", "azure://"),
)
_S3_CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)
_S3_CREDENTIAL_OPTIONS = ("access_key_id", "aws_access_key_id", "skip_signature")
_FETCHER_OPTIONS = (
    *("max_in_flight", "connect_timeout", "read_timeout", "total_timeout"),
    *("min_rate", "min_rate_grace", "max_body_bytes", "content_types"),
)
"""Options passed on to ``HttpFetcher`` under their own names."""
_INGEST_OPTIONS = (
    *("url_field", "text_field", "reorder_bytes", "threads", "shard_samples"),
    *("shard_bytes", "start", "stop", "allow_appended_input"),
)
"""Options passed on to ``ingest`` under their own names."""


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the ``ingest`` subcommand to ``commands`` (from ``add_subparsers``)."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "ingest",
        help="fetch a list of URLs into WebDataset tar shards (resumable exactly)",
        description=(
            "Fetch every URL of INPUT (a .txt file of URLs, .jsonl with a url field, or "
            ".parquet) and write the bodies, optionally resized and re-encoded, into tar "
            "shards in OUTPUT (a folder or an object store URL such as s3://bucket/prefix) "
            "with a manifest. Failed inputs are recorded with their reason. Running the "
            "same command again resumes after the last committed shard."
        ),
    )
    _add_input_arguments(parser)
    _add_image_arguments(parser)
    _add_fetch_arguments(parser)
    _add_shard_arguments(parser)
    _add_run_arguments(parser)
    parser.set_defaults(run=run)
    return parser


def _add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """INPUT, OUTPUT and the fields read from INPUT's rows."""
    parser.add_argument("input", help="URL list: .txt, .jsonl/.ndjson or .parquet")
    parser.add_argument("output", help="folder, or object store URL (s3://bucket/prefix)")
    parser.add_argument("--url-field", default="url", help="URL field of JSONL/Parquet rows")
    parser.add_argument("--text-field", help="field written as each sample's .txt (a caption)")


def _add_image_arguments(parser: argparse.ArgumentParser) -> None:
    """How images are resized and re-encoded."""
    parser.add_argument("--resize", type=positive, metavar="N", help="target size in pixels")
    parser.add_argument(
        "--resize-mode",
        choices=("border", "keep_ratio", "center_crop", "no"),
        default="border",
        help="how --resize fits images (default border: longer side N, padded square)",
    )
    parser.add_argument(
        "--format", choices=("jpeg", "png", "webp"), help="re-encode images in this format"
    )
    parser.add_argument("--quality", type=positive, default=95, help="JPEG/WebP quality")
    parser.add_argument(
        "--full-decode",
        action="store_true",
        help="decode JPEGs at full size before shrinking (default: at reduced scale)",
    )


def _add_fetch_arguments(parser: argparse.ArgumentParser) -> None:
    """How URLs are fetched: concurrency, timeouts, addresses, retries, bodies."""
    parser.add_argument("--max-in-flight", type=positive, default=256, help="requests in all")
    parser.add_argument("--per-host", type=positive, default=16, help="requests per host")
    parser.add_argument("--connect-timeout", type=positive_float, default=10.0, help="seconds")
    parser.add_argument("--read-timeout", type=positive_float, default=30.0, help="seconds")
    parser.add_argument(
        "--total-timeout",
        type=positive_float,
        default=60.0,
        help="seconds one attempt may take, body included (default 60)",
    )
    parser.add_argument(
        "--min-rate",
        type=positive_float,
        default=1024.0,
        help="slowest body accepted in bytes/s, measured over --min-rate-grace (default 1024)",
    )
    parser.add_argument(
        "--min-rate-grace", type=positive_float, default=10.0, help="seconds (default 10)"
    )
    parser.add_argument(
        "--allow-address",
        action="append",
        default=[],
        metavar="CIDR_OR_HOST",
        help="fetch from this non-public network or host too (repeatable), e.g. 10.0.0.0/8; "
        "by default loopback, link-local, private, multicast and reserved addresses are refused",
    )
    parser.add_argument("--retries", type=int, default=2, help="retries of transient failures")
    parser.add_argument(
        "--max-body-bytes", type=positive, default=32 * 1024 * 1024, help="largest body"
    )
    parser.add_argument(
        "--content-type",
        action="append",
        dest="content_types",
        metavar="TYPE",
        help="accepted media type, 'image/' for any image (repeatable; default any)",
    )


def _add_shard_arguments(parser: argparse.ArgumentParser) -> None:
    """How inputs become shards: reordering, shard sizes, threads, the input range."""
    parser.add_argument(
        "--reorder-bytes",
        type=positive,
        default=512 * 1024 * 1024,
        help="bytes of finished inputs held waiting for an earlier one (default 512 MiB)",
    )
    parser.add_argument("--shard-samples", type=positive, default=10_000, help="per shard")
    parser.add_argument("--shard-bytes", type=positive, default=256 * 1024 * 1024)
    parser.add_argument("--threads", type=positive, help="image worker threads (default CPUs)")
    parser.add_argument("--start", type=int, default=0, help="first input position")
    parser.add_argument("--stop", type=int, help="one past the last input position")


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The object store OUTPUT's settings, resuming, the event loop and the output."""
    parser.add_argument(
        "--store-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="obstore setting for an object store OUTPUT (repeatable), e.g. endpoint=...",
    )
    parser.add_argument(
        "--instance-credentials",
        action="store_true",
        help="let an s3:// OUTPUT without explicit credentials use the cloud instance "
        "metadata service (default: refuse with an error)",
    )
    parser.add_argument(
        "--allow-appended-input",
        action="store_true",
        help="resume even though INPUT grew past the end an earlier run reached",
    )
    parser.add_argument("--backend", choices=BACKENDS, default="asyncio", help="event loop")
    parser.add_argument("--quiet", action="store_true", help="no line per committed shard")


def check_s3_credentials(
    output: str, settings: Mapping[str, Any], environ: Mapping[str, str]
) -> None:
    """Refuse an ``s3://`` OUTPUT that has no explicit credentials (see the module doc)."""
    if not output.startswith(("s3://", "s3a://")):
        return
    if any(settings.get(name) for name in _S3_CREDENTIAL_OPTIONS):
        return
    if any(environ.get(name) for name in _S3_CREDENTIAL_VARIABLES):
        return
    raise ValueError(
        f"OUTPUT {output} needs S3 credentials: set AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY, or pass --store-option access_key_id=... --store-option "
        "secret_access_key=...; or pass --instance-credentials to use the cloud instance "
        "metadata service"
    )


def open_output(
    output: str, options: list[str], *, instance_credentials: bool = False
) -> tuple[str, Any]:
    """(destination, store) for an OUTPUT argument: a folder, or a store URL."""
    if not output.startswith(_STORE_SCHEMES):
        if options:
            raise ValueError("--store-option needs an object store OUTPUT (s3://...)")
        return output, None
    from obstore.store import from_url

    from ..sinks import short_reason

    settings: dict[str, Any] = {}
    client: dict[str, Any] = {}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or not key:
            raise ValueError(f"--store-option must be KEY=VALUE but got {option!r}")
        if key in ("allow_http", "timeout", "connect_timeout"):
            client[key] = value
        else:
            settings[key] = value
    if str(settings.get("endpoint", "")).startswith("http://"):
        client.setdefault("allow_http", "true")
    if not instance_credentials:
        check_s3_credentials(output, settings, os.environ)
    try:
        store = from_url(output, client_options=cast(Any, client or None), **settings)
    except Exception as exc:
        raise ValueError(f"cannot open OUTPUT {output}: {short_reason(exc)}") from None
    return "", store


def run(args: argparse.Namespace) -> list[str]:
    """Run ``aioloader ingest`` with parsed arguments; its lines were printed while it ran."""
    from ..ingest import ImageOptions, ingest
    from ..sources import HttpFetcher, RetryPolicy

    if args.retries < 0:
        raise ValueError(f"--retries must be >= 0 but got {args.retries}")
    destination, store = open_output(
        args.output, args.store_option, instance_credentials=args.instance_credentials
    )
    image = None
    if args.resize is not None or args.format is not None:
        image = ImageOptions(
            size=args.resize,
            resize_mode=args.resize_mode,
            format=args.format,
            quality=args.quality,
            reduced_decode=not args.full_decode,
        )

    def committed(record: Any) -> None:
        if not args.quiet:
            span = "" if record.first is None else f" inputs {record.first}..{record.end - 1}"
            print(
                f"committed {record.name}:{span} {record.samples} ok, {record.failed} failed",
                flush=True,
            )

    async def main() -> Any:
        fetcher = HttpFetcher(
            **options_named(args, *_FETCHER_OPTIONS),
            max_per_host=args.per_host,
            allow=args.allow_address,
            retry=RetryPolicy(max_attempts=args.retries + 1, initial_backoff=0.5),
        )
        async with fetcher:
            return await ingest(
                args.input,
                destination if store is not None else args.output,
                **options_named(args, *_INGEST_OPTIONS),
                store=store,
                image=image,
                fetcher=fetcher,
                reorder_window=4 * args.max_in_flight,
                progress=True,
                on_commit=committed,
            )

    import anyio

    backend, options = run_backend(args.backend)
    summary = anyio.run(main, backend=backend, backend_options=options)
    print(summary.format())
    sys.stdout.flush()
    return []
