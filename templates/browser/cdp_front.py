"""The DevTools endpoint as seen through a published port: `cdp_front.py LISTEN TARGET`.

Listens on 127.0.0.1:LISTEN and relays each connection to Chromium's 127.0.0.1:TARGET. Sanbox's
port relay sends Host `127.0.0.1:LISTEN` and the caller's host in X-Forwarded-Host, and Chromium
writes the Host it got into the WebSocket URLs of its `/json` answers, which would send a client
on the host to an address it cannot reach. So for `/json...` requests the answer's
`ws://127.0.0.1:LISTEN` becomes `ws://<X-Forwarded-Host>` (`wss://` when X-Forwarded-Proto is
https); everything else, WebSocket upgrades included, passes through as raw bytes.
Python standard library only: it runs in the guest.
"""

from __future__ import annotations

import asyncio
import re
import sys

MAX_HEAD = 64 * 1024
MAX_JSON = 8 * 1024 * 1024
HEAD_TIMEOUT = 30.0
HOST = re.compile(rb"[A-Za-z0-9.\-]{1,253}(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]{2,45}\](:[0-9]{1,5})?")


def header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, colon, value = line.partition(b":")
        if colon and key.strip().lower() == name:
            return value.strip()
    return None


def rewrite(body: bytes, request_head: bytes) -> bytes:
    """`body` with the ws URLs for the Host Chromium saw pointing at the forwarded host."""
    seen, forwarded = header(request_head, b"host"), header(request_head, b"x-forwarded-host")
    if not seen or not forwarded or not HOST.fullmatch(forwarded):
        return body
    secure = (header(request_head, b"x-forwarded-proto") or b"").lower() == b"https"
    scheme = b"wss" if secure else b"ws"
    body = body.replace(b"ws://" + seen + b"/", scheme + b"://" + forwarded + b"/")
    return body.replace(b"ws=" + seen + b"/", scheme + b"=" + forwarded + b"/")  # frontend URLs


async def read_head(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """The message head (through the blank line) and whatever came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD:
            raise ValueError("head too large")
        chunk = await asyncio.wait_for(reader.read(65536), HEAD_TIMEOUT)
        if not chunk:
            raise EOFError
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def answer_json(
    head: bytes, rest: bytes, up_r: asyncio.StreamReader, up_w: asyncio.StreamWriter
) -> bytes:
    """Send one `/json` request upstream; its whole answer, rewritten."""
    lines = [ln for ln in head.rstrip(b"\r\n").split(b"\r\n") if not
             ln.lower().startswith((b"connection:", b"keep-alive:"))]  # fmt: skip
    up_w.write(b"\r\n".join(lines) + b"\r\nConnection: close\r\n\r\n" + rest)
    await up_w.drain()
    answer_head, body = await read_head(up_r)
    length = header(answer_head, b"content-length")
    want = int(length) if length and length.isdigit() else MAX_JSON
    if want > MAX_JSON:
        raise ValueError("answer too large")
    while len(body) < want:
        chunk = await asyncio.wait_for(up_r.read(65536), HEAD_TIMEOUT)
        if not chunk:
            break
        body += chunk
        if len(body) > MAX_JSON:
            raise ValueError("answer too large")
    body = rewrite(body[:want], head)
    dropped = (b"content-length:", b"connection:", b"keep-alive:")
    kept = [ln for ln in answer_head.rstrip(b"\r\n").split(b"\r\n")
            if not ln.lower().startswith(dropped)]  # fmt: skip
    sized = b"\r\n".join(kept) + b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    return sized + body


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: int) -> None:
    up_w: asyncio.StreamWriter | None = None
    try:
        head, rest = await read_head(reader)
        up_r, up_w = await asyncio.open_connection("127.0.0.1", target)
        path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
        if path.startswith(b"/json") and header(head, b"upgrade") is None:
            writer.write(await answer_json(head, rest, up_r, up_w))
            await writer.drain()
            return
        up_w.write(head + rest)
        await up_w.drain()
        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))
    except (TimeoutError, OSError, EOFError, ValueError):
        pass
    finally:
        for w in (writer, up_w):
            if w is not None:
                w.close()


async def main(listen: int, target: int) -> None:
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, target), "127.0.0.1", listen, limit=MAX_HEAD
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
