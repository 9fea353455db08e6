"""``aioloader ingest``: the command line, to a folder and to object storage."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from aioloader.cli import build_parser, main
from aioloader.sinks import open_shards, read_manifest
from tests._support.http_server import HttpTestServer
from tests._support.s3 import S3Info

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server() -> Iterator[HttpTestServer]:
    with HttpTestServer() as running:
        yield running


def test_the_subcommand_is_registered_with_its_options() -> None:
    args = build_parser().parse_args(
        ["ingest", "in.txt", "out", "--resize", "64", "--per-host", "4", "--shard-samples", "9"]
    )
    assert (args.command, args.input, args.output) == ("ingest", "in.txt", "out")
    assert (args.resize, args.per_host, args.shard_samples, args.max_in_flight) == (64, 4, 9, 256)


def test_a_url_list_becomes_shards_and_a_summary(
    server: HttpTestServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("".join(server.url(f"/img/{i}.jpg") + "\n" for i in range(10)))
    urls.write_text(urls.read_text() + server.url("/status/404/gone") + "\n")
    out = tmp_path / "out"
    options = ["--shard-samples", "4", "--format", "png", "--allow-address", "127.0.0.1"]
    status = main(["ingest", str(urls), str(out), *options])
    printed = capsys.readouterr().out
    assert status == 0
    assert printed.splitlines()[:3] == [
        "committed shard-000000.tar: inputs 0..3 4 ok, 0 failed",
        "committed shard-000001.tar: inputs 4..7 4 ok, 0 failed",
        "committed shard-000002.tar: inputs 8..10 2 ok, 1 failed",
    ]
    assert "10 ok, 1 failed" in printed
    assert "failed by reason: status 1" in printed
    shards = open_shards(out)
    first = anyio.run(shards.read_sample, 0)
    assert sorted(first) == ["__key__", "json", "png"]


def test_store_options_need_a_store_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["ingest", str(tmp_path / "in.txt"), str(tmp_path), "--store-option", "a=b"])
    assert code == 2
    assert "--store-option needs an object store OUTPUT" in capsys.readouterr().err


def test_the_command_writes_to_an_s3_url(
    server: HttpTestServer, tmp_path: Path, s3_server: S3Info
) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("".join(server.url(f"/img/{i}.jpg") + "\n" for i in range(6)))
    prefix = "ingest-cli/run1"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "aioloader",
            "ingest",
            str(urls),
            f"s3://{s3_server.bucket}/{prefix}",
            "--store-option",
            f"endpoint={s3_server.endpoint}",
            "--store-option",
            f"access_key_id={s3_server.access_key_id}",
            "--store-option",
            f"secret_access_key={s3_server.secret_access_key}",
            "--store-option",
            f"region={s3_server.region}",
            "--store-option",
            "virtual_hosted_style_request=false",
            "--shard-samples",
            "4",
            "--allow-address",
            "127.0.0.1",
            "--backend",
            "trio",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    store = s3_server.store()
    manifest = read_manifest(prefix + "/", store)
    assert [(r.samples, r.first, r.end) for r in manifest.shards] == [(4, 0, 4), (2, 4, 6)]
    shards = open_shards(prefix + "/", store)
    assert len(shards) == 6
