"""Retry policy, failure classification and request counters of retried reads.

Transient: timeouts, dropped connections, bodies cut short (the connection closed before
``Content-Length`` bytes came), HTTP 408, 429 and 5xx. Not found: HTTP 404 (or obstore's
``FileNotFoundError``). Denied: HTTP 401 and 403. Anything else is permanent. Summaries name
the HTTP status and the S3 error code, never a credential.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Any

from ..core import RngStream, SampleRng, derive, positive, u64

__all__ = (
    "RequestCounters",
    "RetryPolicy",
    "describe_failure",
    "is_range_error",
    "scrub",
    "secrets_of",
)

_STATUS = re.compile(r"status code: (\d{3})")
_S3_CODE = re.compile(r"<Code>([^<]{1,64})</Code>")
_QUERY_SECRET = re.compile(
    r"([?&][^=&\s]*(?:signature|credential|token|sig|key|security)[^=&\s]*=)[^&\s]*", re.I
)
# How obstore (reqwest, hyper) reports a body that ended before its Content-Length.
_SHORT_BODY = re.compile(r"body error|decoding response body|unexpected eof", re.I)
_SECRET_CONFIG = re.compile(r"secret|token|password|key|credential|sas|signature", re.I)


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried.

    The wait after failed attempt ``a`` (1-based) is ``min(max_backoff, initial_backoff *
    multiplier ** (a - 1))`` scaled by a factor in ``[1 - jitter, 1]`` drawn from the seed.

    Args:
        max_attempts: Attempts per read, the first included (1 disables retrying).
        initial_backoff: Seconds to wait after the first failure.
        max_backoff: Longest wait in seconds.
        multiplier: Growth of the wait from one retry to the next.
        jitter: Fraction of the wait that is random, in ``[0, 1]``.
        seed: Seed of the jitter.
    """

    max_attempts: int = 5
    initial_backoff: float = 0.05
    max_backoff: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        positive("max_attempts", self.max_attempts)
        for name in ("initial_backoff", "max_backoff"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 <= value < float("inf")):
                raise ValueError(f"{name} must be a finite number >= 0 but got {value!r}")
        if not (isinstance(self.multiplier, (int, float)) and 1 <= self.multiplier < 1e6):
            raise ValueError(f"multiplier must be in [1, 1e6) but got {self.multiplier!r}")
        if not (isinstance(self.jitter, (int, float)) and 0 <= self.jitter <= 1):
            raise ValueError(f"jitter must be in [0, 1] but got {self.jitter!r}")
        u64("seed", self.seed)

    def backoff(self, key: str, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based) of reading ``key``."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        token = zlib.crc32(key.encode("utf-8", "surrogatepass"))
        rng = SampleRng(derive(self.seed, 0, token, attempt, RngStream.RETRY_JITTER))
        return float(base * (1.0 - self.jitter * rng.next_double()))


@dataclass(frozen=True)
class RequestCounters:
    """The counters every retrying reader's statistics start with.

    Attributes:
        requests: Attempts sent, retries included.
        retries: Attempts that followed a transient failure.
    """

    requests: int
    retries: int


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """(kind, summary) of a failed attempt; kind is transient, not_found, denied or permanent."""
    if isinstance(exc, TimeoutError):
        return "transient", "timed out"
    text = str(exc)
    first = text.splitlines()[0] if text else type(exc).__name__
    status_match = _STATUS.search(first)
    code_match = _S3_CODE.search(text)
    status = int(status_match.group(1)) if status_match else None
    detail = " ".join(
        part
        for part in (f"HTTP {status}" if status else "", code_match and code_match.group(1))
        if part
    )
    if isinstance(exc, FileNotFoundError) or status == 404:
        return "not_found", detail or "not found"
    denied_type = type(exc).__name__ in ("PermissionDeniedError", "UnauthenticatedError")
    if denied_type or status in (401, 403):
        return "denied", detail or type(exc).__name__
    if status is not None:
        if status in (408, 429) or status >= 500:
            return "transient", detail
        return "permanent", detail
    if _SHORT_BODY.search(first) or "IncompleteBody" in text:  # never data: read it again
        return "transient", "response body cut short (fewer bytes than its Content-Length)"
    if isinstance(exc, ConnectionError) or "HTTP error" in first or "error sending" in first:
        return "transient", "connection error"
    return "permanent", f"{type(exc).__name__}: {first[:200]}"


def is_range_error(exc: BaseException) -> bool:
    """Whether a failed open-ended range read should be retried as a plain GET."""
    text = str(exc)
    first = text.splitlines()[0] if text else ""
    status = _STATUS.search(first)
    if status is not None:
        return status.group(1) == "416"
    return "range" in first.lower() and describe_failure(exc)[0] == "permanent"


def secrets_of(store: Any) -> list[str]:
    """Values of the store's configuration that look like credentials, longest first."""
    config = getattr(store, "config", None)
    items = config.items() if isinstance(config, dict) else ()
    found = {
        str(value)
        for name, value in items
        if _SECRET_CONFIG.search(str(name)) and value and len(str(value)) >= 4
    }
    return sorted(found, key=len, reverse=True)


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with every known secret and every signed-URL parameter value masked."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return _QUERY_SECRET.sub(r"\1***", text)
