"""What the test internet's HTTP stubs (echo.test, model.test) share: reading one request off a
kept-alive connection, its body framed by Content-Length or chunked and bounded, and logging it
whole, headers and all, on the host (never seen by a guest), one JSON line each."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

MAX_BODY = 8 << 20  # bytes of one request body read; a bigger one ends the connection


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: list[list[str]]  # [name, value] as received
    body: bytes

    @property
    def closes(self) -> bool:
        return any(k.lower() == "connection" and v.lower() == "close" for k, v in self.headers)


async def read_body(reader: asyncio.StreamReader, headers: list[list[str]]) -> bytes:
    fields = {k.lower(): v for k, v in headers}
    if fields.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # the last chunk's CRLF (no trailers here)
                return body
            if len(body) + size > MAX_BODY:
                raise ValueError("request body too large")
            body += (await reader.readexactly(size + 2))[:-2]
    length = int(fields.get("content-length", "0") or 0)
    if length > MAX_BODY:
        raise ValueError("request body too large")
    return await reader.readexactly(length)


async def next_request(reader: asyncio.StreamReader, log: Path) -> Request | None:
    """The connection's next request, logged; None once the client has closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path = (lines[0].split(" ") + ["", ""])[:2]
    headers = [[k.strip(), v.strip()] for k, _, v in (h.partition(":") for h in lines[1:] if h)]
    body = await read_body(reader, headers)
    with log.open("a") as f:
        f.write(
            json.dumps(
                {"method": method, "path": path, "headers": headers, "body_bytes": len(body)}
            )
            + "\n"
        )
    return Request(method, path, headers, body)
