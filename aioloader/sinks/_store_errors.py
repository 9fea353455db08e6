"""Object store failures as short, clear errors (obstore's own messages end in debug dumps)."""

from __future__ import annotations

import re

__all__ = ("VersionConflictError", "short_reason", "store_error", "store_failure")

_CODE = re.compile(r"<Code>([^<]+)</Code>")
_MESSAGE = re.compile(r"<Message>([^<]+)</Message>")
_STATUS = re.compile(r"(\d{3} [A-Z][A-Za-z ]+?)(?::|$)", re.MULTILINE)
_NOT_FOUND_CODES = ("NoSuchKey", "NotFound", "BlobNotFound")


class VersionConflictError(Exception):
    """A conditional write found another version than the one expected.

    Attributes:
        where: The object, for messages.
        expected: The version the writer expected (None: absent).
        found: The version found (None: absent).
    """

    def __init__(self, where: str, expected: str | None, found: str | None) -> None:
        super().__init__(f"{where} changed: expected version {expected!r} but found {found!r}")
        self.where = where
        self.expected = expected
        self.found = found


def short_reason(error: BaseException) -> str:
    """The gist of an obstore error in one line: the S3 code and message, or the first line."""
    text = str(error)
    code, message = _CODE.search(text), _MESSAGE.search(text)
    if code:
        return code.group(1) + (f" ({message.group(1)})" if message else "")
    head = text.split("\n\nDebug source:", 1)[0].strip().splitlines()
    first = head[0] if head else type(error).__name__
    status = _STATUS.search(text)
    if "error sending request" in text or "Connection refused" in text:
        return "cannot connect to the store's endpoint" + _endpoint(text)
    if status and len(first) > 200:
        return status.group(1)
    return first[:200]


def _endpoint(text: str) -> str:
    found = re.search(r"https?://[^/\s]+", text)
    return f" ({found.group(0)})" if found else ""


def store_error(
    error: BaseException, action: str, where: str, *, missing_ok: bool = True
) -> OSError | None:
    """An ``OSError`` that says in one line why ``action`` on ``where`` failed.

    Returns None when the object is simply missing and ``missing_ok`` (the caller treats
    that as absent); a missing bucket or container is an error all the same.
    """
    text = str(error)
    code = _CODE.search(text)
    missing = isinstance(error, FileNotFoundError) or type(error).__name__ == "NotFoundError"
    if missing and missing_ok and (code is None or code.group(1) in _NOT_FOUND_CODES):
        return None
    kind = FileNotFoundError if missing else OSError
    return kind(f"cannot {action} {where}: {short_reason(error)}")


def store_failure(error: BaseException, action: str, where: str) -> OSError:
    """``store_error`` for an action where a missing object is an error too."""
    failure = store_error(error, action, where, missing_ok=False)
    assert failure is not None
    return failure
