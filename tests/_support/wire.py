"""HTTP/1.1 over a raw asyncio stream: what the loopback test servers read the same way."""

from __future__ import annotations

import asyncio


async def next_request_head(reader: asyncio.StreamReader) -> bytes | None:
    """The next request's head (up to the blank line), or None once the client is gone.

    A client that closed or reset the connection, or sent a head longer than the stream's
    limit, ends the connection quietly: the server has nothing to answer.
    """
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
