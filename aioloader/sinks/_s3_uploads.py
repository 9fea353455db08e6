"""Pending S3 multipart uploads: list and abort them (what a killed upload leaves billed).

obstore uploads large shards in parts but cannot list or abort uploads it did not start
itself, so a writer killed mid-upload leaves parts that stay stored (and billed) until a
bucket lifecycle rule removes them. This module makes the two S3 calls that clean them
up, ``ListMultipartUploads`` and ``AbortMultipartUpload``, as plain HTTPS requests signed
with AWS Signature Version 4, using the store's own endpoint, region and static
credentials (``store.config``, or the ``AWS_*`` variables obstore read them from).

Why not obstore itself (checked against obstore 0.12): ``put`` runs a multipart upload
whole in Rust and neither returns nor takes the upload's id, so a writer cannot record the
id in its lease before the first part; obstore binds no ``MultipartStore`` (no
``create_multipart``, no ``abort_multipart(path, id)``) and has no listing of pending
uploads; it aborts only an upload that fails in a process still running (a SIGKILLed one
runs no code); and ``obstore.sign`` presigns a bare object path (a ``?uploadId=`` is
quoted into the key), so it cannot sign these calls either. Listing also finds uploads
that a journal written before the crash would miss.

A store without static credentials in its config (credentials from a provider chain)
cannot be signed here: ``S3Uploads.for_store`` returns None.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ("S3Uploads", "SigV4Credentials")

_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_NAMESPACE = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_TIMEOUT = 30.0


def _from_environment() -> dict[str, str]:
    """The S3 settings obstore reads from ``AWS_*`` variables (its config omits them)."""
    names = {
        "access_key_id": ("AWS_ACCESS_KEY_ID",),
        "secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
        "session_token": ("AWS_SESSION_TOKEN", "AWS_TOKEN"),
        "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
        "endpoint": ("AWS_ENDPOINT", "AWS_ENDPOINT_URL"),
        "virtual_hosted_style_request": ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST",),
    }
    found = {}
    for key, variables in names.items():
        for variable in variables:
            if os.environ.get(variable):
                found[key] = os.environ[variable]
                break
    return found


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _quote(text: str, safe: str = "-_.~") -> str:
    return urllib.parse.quote(text, safe=safe)


@dataclass(frozen=True)
class SigV4Credentials:
    """Static credentials that sign requests with AWS Signature Version 4, in one region.

    Attributes:
        region: The signing region.
        access_key_id: The access key.
        secret_access_key: The secret key (left out of the repr).
        session_token: A session token, or None (left out of the repr).
    """

    region: str
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)

    def signing_key(self, day: str, service: str = "s3") -> bytes:
        """The key of ``day`` (``YYYYMMDD``) that signs ``service``'s requests."""
        key = _hmac(("AWS4" + self.secret_access_key).encode(), day)
        for part in (self.region, service, "aws4_request"):
            key = _hmac(key, part)
        return key

    def signed_headers(
        self, method: str, host: str, path: str, query: str, now: datetime.datetime
    ) -> dict[str, str]:
        """The headers of an S3 request without a body, ``authorization`` included.

        ``path`` and ``query`` are already canonical (quoted; the query sorted).
        """
        stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        headers = {"host": host, "x-amz-content-sha256": _EMPTY_SHA256, "x-amz-date": stamp}
        if self.session_token:
            headers["x-amz-security-token"] = self.session_token
        signed = ";".join(sorted(headers))
        canonical = "\n".join(
            [
                method,
                path,
                query,
                "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)),
                signed,
                _EMPTY_SHA256,
            ]
        )
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        signature = hmac.new(self.signing_key(day), to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={self.access_key_id}/{scope}, "
            f"SignedHeaders={signed}, Signature={signature}"
        )
        return headers


@dataclass(frozen=True)
class S3Uploads:
    """Signed ``ListMultipartUploads`` / ``AbortMultipartUpload`` calls for one bucket.

    Attributes:
        endpoint: Scheme and host (``https://s3.us-east-1.amazonaws.com``).
        bucket: The bucket.
        credentials: What signs the calls.
        virtual_hosted: Address the bucket as a host name instead of a path.
        store_prefix: The store's own key prefix (keys given and returned omit it).
    """

    endpoint: str
    bucket: str
    credentials: SigV4Credentials
    virtual_hosted: bool = False
    store_prefix: str = ""

    @staticmethod
    def for_store(store: Any) -> S3Uploads | None:
        """The calls for an obstore ``S3Store`` with static credentials, else None."""
        if type(store).__name__ != "S3Store":
            return None
        config: dict[str, Any] = {**_from_environment(), **dict(store.config)}
        access, secret = config.get("access_key_id"), config.get("secret_access_key")
        bucket = config.get("bucket")
        if not (access and secret and bucket):
            return None
        region = str(config.get("region") or "us-east-1")
        endpoint = config.get("endpoint")
        virtual = str(config.get("virtual_hosted_style_request", "false")).lower() == "true"
        if not endpoint:
            endpoint, virtual = f"https://s3.{region}.amazonaws.com", True
        prefix = str(store.prefix or "").strip("/")
        return S3Uploads(
            endpoint=str(endpoint).rstrip("/"),
            bucket=str(bucket),
            credentials=SigV4Credentials(
                region=region,
                access_key_id=str(access),
                secret_access_key=str(secret),
                session_token=config.get("session_token") or config.get("token"),
            ),
            virtual_hosted=virtual,
            store_prefix=prefix + "/" if prefix else "",
        )

    def _url(self, key: str) -> tuple[str, str, str]:
        """(base URL, host, canonical path) of ``key`` ("" for the bucket itself)."""
        parsed = urllib.parse.urlsplit(self.endpoint)
        host = parsed.netloc
        path = "/" + _quote(key, safe="-_.~/") if key else "/"
        if self.virtual_hosted:
            host = f"{self.bucket}.{host}"
        else:
            path = f"/{self.bucket}" + (path if key else "")
        if not key and not self.virtual_hosted:
            path = f"/{self.bucket}/"
        return f"{parsed.scheme}://{host}", host, path

    def _request(self, method: str, key: str, query: Mapping[str, str]) -> bytes:
        base, host, path = self._url(key)
        canonical_query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(query.items()))
        now = datetime.datetime.now(datetime.timezone.utc)
        headers = self.credentials.signed_headers(method, host, path, canonical_query, now)
        url = base + path + (f"?{canonical_query}" if canonical_query else "")
        request = urllib.request.Request(url, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", "replace")
            raise OSError(
                f"S3 {method} {url.split('?')[0]} ({', '.join(query) or 'object'}) failed: "
                f"HTTP {exc.code} {body[:200]}"
            ) from None

    def pending(self, prefix: str = "") -> Iterator[tuple[str, str]]:
        """``(key, upload_id)`` of every pending multipart upload whose key starts ``prefix``.

        Keys are relative to the store's prefix, as obstore names them.
        """
        query = {"uploads": "", "prefix": self.store_prefix + prefix}
        while True:
            root = ElementTree.fromstring(self._request("GET", "", query))
            for upload in root.iter(f"{_NAMESPACE}Upload"):
                key = upload.findtext(f"{_NAMESPACE}Key") or ""
                upload_id = upload.findtext(f"{_NAMESPACE}UploadId") or ""
                if key.startswith(self.store_prefix) and upload_id:
                    yield key[len(self.store_prefix) :], upload_id
            if (root.findtext(f"{_NAMESPACE}IsTruncated") or "").lower() != "true":
                return
            query = {
                **query,
                "key-marker": root.findtext(f"{_NAMESPACE}NextKeyMarker") or "",
                "upload-id-marker": root.findtext(f"{_NAMESPACE}NextUploadIdMarker") or "",
            }

    def abort(self, key: str, upload_id: str) -> None:
        """Abort the multipart upload ``upload_id`` of ``key`` (relative to the store prefix)."""
        self._request("DELETE", self.store_prefix + key, {"uploadId": upload_id})
