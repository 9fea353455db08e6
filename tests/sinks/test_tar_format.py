"""Tar member headers: the fast ustar path writes exactly what tarfile writes."""

from __future__ import annotations

import tarfile

import pytest

from aioloader.sinks._tar_format import member_header


@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("a.b", 0),
        ("000000001.jpg", 12345),
        ("x" * 98 + ".j", 8**11 - 1),
        ("dir/sub/key.json", 7),
        ("y" * 120 + ".jpg", 3),  # too long for ustar's name field: pax header
        ("caf\u00e9.txt", 4),  # not ASCII: pax header
        ("big.bin", 8**11),  # too large for the size field: pax header
    ],
)
def test_headers_equal_tarfiles_pax_format(name: str, size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    info.uname = info.gname = ""
    assert member_header(name, size) == info.tobuf(tarfile.PAX_FORMAT, "utf-8", "strict")
