"""aioloader.sinks._s3_uploads: AWS Signature Version 4, checked against AWS's own examples."""

from __future__ import annotations

import datetime

from aioloader.sinks._s3_uploads import SigV4Credentials

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
