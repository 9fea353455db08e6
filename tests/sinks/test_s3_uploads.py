"""aioloader.sinks._s3_uploads: AWS Signature Version 4, checked against AWS's own examples;
the uploads a killed writer left, aborted by the next one (on the real S3 server)."""

from __future__ import annotations

import datetime
import signal
import subprocess
import sys
import time
from pathlib import Path

from aioloader.sinks import TarShardWriter
from aioloader.sinks._s3_uploads import S3Uploads, SigV4Credentials
from tests._support.s3 import S3Info

ROOT = Path(__file__).resolve().parents[2]

# The example credentials of AWS's Signature Version 4 documentation.
ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
S3_EXAMPLE_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
EXAMPLE_DAY = datetime.datetime(2013, 5, 24, tzinfo=datetime.timezone.utc)


def test_signing_key_is_the_documented_one() -> None:
    credentials = SigV4Credentials(
        region="us-east-1",
        access_key_id=ACCESS_KEY,
        secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    )
    assert (
        credentials.signing_key("20120215", "iam").hex()
        == "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"
    )


def test_signed_headers_are_those_of_the_documented_list_objects_request() -> None:
    credentials = SigV4Credentials("us-east-1", ACCESS_KEY, S3_EXAMPLE_SECRET)
    headers = credentials.signed_headers(
        "GET", "examplebucket.s3.amazonaws.com", "/", "max-keys=2&prefix=J", EXAMPLE_DAY
    )
    assert headers == {
        "host": "examplebucket.s3.amazonaws.com",
        "x-amz-content-sha256": EMPTY_SHA256,
        "x-amz-date": "20130524T000000Z",
        "authorization": (
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
            "aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
            "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
        ),
    }


def test_a_session_token_is_signed_and_neither_secret_is_in_the_repr() -> None:
    credentials = SigV4Credentials("eu-west-1", ACCESS_KEY, S3_EXAMPLE_SECRET, "TOKEN-123")
    headers = credentials.signed_headers("DELETE", "h", "/b/k", "uploadId=7", EXAMPLE_DAY)
    assert headers["x-amz-security-token"] == "TOKEN-123"
    assert headers["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/eu-west-1/s3/aws4_request, "
        "SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token, "
        "Signature=0a80cd5776d106b057ce090548cdb477c24d2571e1c5d7c95b3a370722582460"
    )
    assert repr(credentials) == (
        "SigV4Credentials(region='eu-west-1', access_key_id='AKIAIOSFODNN7EXAMPLE')"
    )


_WRITER_KILLED_MID_UPLOAD = """
import sys, anyio
sys.path.insert(0, {root!r})
from aioloader.sinks import TarShardWriter
from tests._support.s3 import S3Info

async def main():
    writer = TarShardWriter({prefix!r}, store=S3Info(**{info!r}).store(), max_samples=16,
                            part_size=5 * 1024 * 1024)
    for i in range(10_000):  # 48 MB shards in ten parts each, until killed
        await writer.write(f"k{{i:05d}}", {{"bin": bytes([i % 256]) * 3_000_000}}, position=i)

anyio.run(main)
"""


def test_an_upload_a_killed_writer_left_is_aborted_by_the_next_writer(
    s3_server: S3Info, s3_prefix: str
) -> None:
    store = s3_server.store()
    uploads = S3Uploads.for_store(store)
    assert uploads is not None
    info = {
        "endpoint": s3_server.endpoint,
        "bucket": s3_server.bucket,
        "access_key_id": s3_server.access_key_id,
        "secret_access_key": s3_server.secret_access_key,
    }
    script = _WRITER_KILLED_MID_UPLOAD.format(root=str(ROOT), info=info, prefix=s3_prefix)
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    pending: list[tuple[str, str]] = []
    deadline = time.monotonic() + 120
    while process.poll() is None and not pending and time.monotonic() < deadline:
        pending = list(uploads.pending(s3_prefix))  # watch the server: no event to wait on
    process.send_signal(signal.SIGKILL)  # in the middle of a shard's multipart upload
    _, errors = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL, errors
    assert len(pending) == 1
    assert pending[0][0].startswith(s3_prefix + "shard-")
    resumed = TarShardWriter(s3_prefix, store=store, max_samples=16, resume=True)
    resumed.abort()  # opening it took the lease and aborted what the killed writer left
    assert list(uploads.pending(s3_prefix)) == []
