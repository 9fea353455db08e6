"""Tar members in WebDataset layout, written byte-identically for the same input.

Every member is a regular file named ``{key}.{field}``, mode 0644, owner 0, mtime 0, in
POSIX pax format (a plain ustar header unless the name needs more), so the same samples
always give the same shard bytes and the same checksum. An archive ends with two zero
blocks.
"""

from __future__ import annotations

import tarfile

__all__ = ("BLOCK", "END_OF_ARCHIVE", "check_field", "check_key", "member_header", "padding")

BLOCK = 512
END_OF_ARCHIVE = bytes(2 * BLOCK)


def _ustar_header(name: bytes, size: int) -> bytes:
    """The one ustar block tarfile writes for a short ASCII name (built ~10x faster)."""
    header = bytearray(BLOCK)
    header[0 : len(name)] = name
    header[100:108] = b"0000644\0"
    header[108:116] = header[116:124] = b"0000000\0"
    header[124:136] = b"%011o\0" % size
    header[136:148] = b"00000000000\0"
    header[148:156] = b"        "
    header[156:157] = b"0"
    header[257:265] = b"ustar\x0000"
    header[148:155] = b"%06o\0" % sum(header)
    return bytes(header)


def member_header(name: str, size: int) -> bytes:
    """The header block(s) of a regular file ``name`` of ``size`` bytes."""
    if name.isascii() and len(name) <= 100 and size < 8**11:
        return _ustar_header(name.encode("ascii"), size)
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    info.mtime = 0
    info.uname = info.gname = ""
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "strict")


def padding(size: int) -> bytes:
    """Zero bytes that bring ``size`` bytes of member data to a whole block."""
    return bytes(-size % BLOCK)


def check_key(key: object) -> str:
    """``key`` if it is a valid sample key (WebDataset: no dot in its base name)."""
    if not isinstance(key, str) or not key:
        raise TypeError(f"key must be a non-empty str but got {key!r}")
    base = key.rsplit("/", 1)[-1]
    if not base or "." in base or key.startswith("/") or ".." in key.split("/") or "\0" in key:
        raise ValueError(
            "key must be a relative name whose last component is non-empty and has no dot "
            f"(TarShards splits member names at the first dot) but got {key!r}"
        )
    return key


def check_field(key: str, field: object, data: object) -> tuple[str, bytes]:
    """(field, data) of one member, checked: a non-empty field without '/', bytes data."""
    if not isinstance(field, str) or not field or "/" in field or field.startswith("."):
        raise ValueError(
            f"field names must be non-empty strs without '/' and not starting with '.' but "
            f"sample {key!r} has {field!r}"
        )
    if isinstance(data, str):
        raise TypeError(
            f"field {field!r} of sample {key!r} must be bytes but got a str; encode it first"
        )
    try:
        raw = bytes(data)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(
            f"field {field!r} of sample {key!r} must be bytes-like but got {type(data).__name__}"
        ) from None
    return field, raw
