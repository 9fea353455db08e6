"""``aioloader ingest``: the command line, to a folder and to object storage."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from aioloader.cli import build_parser, main
from aioloader.sinks import open_shards, read_manifest
from aioloader.sinks._s3_uploads import S3Uploads
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


def _loopback_s3_environment(monkeypatch: pytest.MonkeyPatch, info: S3Info) -> None:
    """Explicit S3 settings in the environment, so obstore contacts the loopback server only."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT", info.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", info.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", info.secret_access_key)
    monkeypatch.setenv("AWS_REGION", info.region)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")


def test_a_missing_bucket_is_one_short_error_line(
    tmp_path: Path,
    s3_server: S3Info,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _loopback_s3_environment(monkeypatch, s3_server)
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.1:9/img/0.jpg\n")
    code = main(["ingest", str(urls), "s3://nobucket/prefix"])
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, "")
    assert captured.err == (
        "error: cannot read s3://nobucket/prefix/manifest.json: NoSuchBucket (The specified "
        "bucket does not exist)\n"
    )


def test_an_s3_output_without_credentials_is_refused_before_any_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT", "http://127.0.0.1:9")  # never contacted
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.1:9/img/0.jpg\n")
    assert main(["ingest", str(urls), "s3://bucket/prefix"]) == 2
    assert capsys.readouterr().err == (
        "error: OUTPUT s3://bucket/prefix needs S3 credentials: set AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY, or pass --store-option access_key_id=... --store-option "
        "secret_access_key=...; or pass --instance-credentials to use the cloud instance "
        "metadata service\n"
    )


def test_a_missing_input_is_an_error_before_the_output_folder_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["ingest", str(tmp_path / "nothing.txt"), str(out)]) == 2
    assert capsys.readouterr().err == (
        f"error: inputs must be a file of URLs but {str(tmp_path / 'nothing.txt')!r} is not one\n"
    )
    assert not out.exists()


def _shards_of_20(urls: Path, out: Path) -> list[str]:
    """The quiet command line that ingests ``urls`` (on loopback) into shards of 20 at ``out``."""
    return [
        *("ingest", str(urls), str(out), "--shard-samples", "20", "--quiet"),
        *("--allow-address", "127.0.0.1"),
    ]


def test_resuming_with_a_changed_input_or_setting_is_refused_by_the_command(
    server: HttpTestServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urls = tmp_path / "urls.txt"
    lines = [server.url(f"/img/{i}.jpg") + "\n" for i in range(60)]
    urls.write_text("".join(lines))
    out = tmp_path / "out"
    base = _shards_of_20(urls, out)
    assert main([*base, "--stop", "40", "--content-type", "image/"]) == 0
    capsys.readouterr()
    assert main(base) == 2
    assert capsys.readouterr().err.startswith(
        f"error: cannot resume from {out / 'manifest.json'}: settings that decide the output "
        "changed: content_types was ['image/'] and is now None (resume with"
    )
    urls.write_text("".join(server.url(f"/img/{i + 500}.jpg") + "\n" for i in range(50)) +
                    "".join(lines))  # fmt: skip
    assert main([*base, "--content-type", "image/"]) == 2
    assert capsys.readouterr().err.startswith(
        f"error: cannot resume from {out / 'manifest.json'}: the input is not the one its "
        "shards were written from: the inputs at positions 0..19 (shard-000000.tar) differ"
    )
    assert read_manifest(out).end == 40


def test_an_appended_input_needs_the_flag(
    server: HttpTestServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("".join(server.url(f"/img/{i}.jpg") + "\n" for i in range(30)))
    out = tmp_path / "out"
    base = _shards_of_20(urls, out)
    assert main(base) == 0
    urls.write_text(urls.read_text() + server.url("/img/30.jpg") + "\n")
    capsys.readouterr()
    assert main(base) == 2
    assert "reached the end of its input at position 30" in capsys.readouterr().err
    assert main([*base, "--allow-appended-input"]) == 0
    assert "resumed: inputs before position 30 were committed" in capsys.readouterr().out
    assert [(r.first, r.end) for r in read_manifest(out).shards] == [(0, 20), (20, 30), (30, 31)]


def test_a_multipart_upload_killed_midway_is_aborted_on_resume(
    server: HttpTestServer, tmp_path: Path, s3_server: S3Info
) -> None:
    count, size = 120, 1024 * 1024
    urls = tmp_path / "urls.txt"
    urls.write_text("".join(server.url(f"/big/{size}/{i}") + "\n" for i in range(count)))
    prefix = "ingest-cli/killed-upload"
    store = s3_server.store()
    uploads = S3Uploads.for_store(store)
    assert uploads is not None
    command = [sys.executable, "-m", "aioloader", "ingest", str(urls)]
    command += [f"s3://{s3_server.bucket}/{prefix}", "--shard-bytes", str(40 * size)]
    command += ["--max-in-flight", "8", "--quiet", "--allow-address", "127.0.0.1"]
    environment = {**os.environ, "AWS_ENDPOINT": s3_server.endpoint, "AWS_ALLOW_HTTP": "true"}
    environment.update(AWS_ACCESS_KEY_ID=s3_server.access_key_id, AWS_REGION=s3_server.region,
                       AWS_SECRET_ACCESS_KEY=s3_server.secret_access_key)  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    pending: list[tuple[str, str]] = []
    while process.poll() is None and not pending:  # watch the server: no event to wait on
        pending = list(uploads.pending(prefix + "/"))
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    assert pending, "the run ended before a multipart upload was seen"
    assert [key.rsplit("/", 1)[-1] for key, _ in pending] == ["shard-000000.tar"]
    resumed = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True,
                             text=True, timeout=300, check=False)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert list(uploads.pending(prefix + "/")) == []
    manifest = read_manifest(prefix + "/", store)
    assert (manifest.shards[0].first, manifest.end, manifest.total_samples) == (0, count, count)
