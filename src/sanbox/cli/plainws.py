"""A WebSocket over a plain TCP connection (RFC 6455, `ws://` only): all `sanbox exec`'s fast path
(sanbox.cli.fastpath) needs of one. The `websockets` library takes ~0.04 s to load (its version
module loads importlib.metadata, which loads the email package), in a command whose exec the
server answers in ~0.01 s. `wss://` goes through the library (ssl is loaded for it anyway).

The client side of the protocol only: the handshake (its accept key checked), masked frames out,
unmasked frames in (text, binary, their continuations, ping answered with pong, close), and the
close handshake at the end. A message is `MAX_MESSAGE` bytes at most, as the SDK takes it. A
refused handshake (any answer but 101) becomes the API's error, as
`sdk._websocket.websockets_connector` makes it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

from ..sdk._websocket import MAX_MESSAGE, WebSocketClosedError
from ..sdk.errors import ConnectionFailedError, error_from_response

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
HEAD_LIMIT = 64 * 1024  # the handshake's answer head
BODY_LIMIT = 1024 * 1024  # a refusal's body
CLOSE_WAIT = 2.0  # s for the server's close frame at the end


def accept_key(key: bytes) -> bytes:
    """The Sec-WebSocket-Accept a server answers to `key`."""
    return base64.b64encode(hashlib.sha1(key + GUID).digest())


def frame(opcode: int, payload: bytes, mask: bytes) -> bytes:
    """One final, masked client frame. Pure: unit-tested."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    if not payload:
        return head + mask
    key = (mask * (n // 4 + 1))[:n]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")
    return head + mask + masked


class PlainWebSocket:
    """One open WebSocket (sdk._websocket.WebSocketLike)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._closed: WebSocketClosedError | None = None
        self._close_sent = False

    async def send(self, message: str) -> None:
        await self._send(TEXT, message.encode())

    async def send_bytes(self, data: bytes) -> None:
        await self._send(BINARY, data)

    async def recv(self) -> str:
        message = await self.recv_message()
        return message if isinstance(message, str) else message.decode("utf-8", "replace")

    async def recv_message(self) -> str | bytes:
        """The next whole message: text as `str`, binary as `bytes`."""
        parts: list[bytes] = []
        kind: int | None = None
        size = 0
        while True:
            fin, opcode, payload = await self._frame()
            if opcode == PING:
                await self._send(PONG, payload)
            elif opcode == CLOSE:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                if not self._close_sent:  # the answer to the server's close, once
                    with contextlib.suppress(OSError, WebSocketClosedError):
                        await self._send(CLOSE, payload[:2])
                self._closed = WebSocketClosedError(f"websocket closed ({code})", close_code=code)
                raise self._closed
            elif opcode in (TEXT, BINARY, CONTINUATION) and (opcode == CONTINUATION) == bool(
                parts or kind is not None
            ):
                kind = opcode if kind is None else kind
                parts.append(payload)
                size += len(payload)
                if size > MAX_MESSAGE:  # fragments that add up past it: refused as one frame is
                    raise await self._too_big()
                if fin:
                    data = b"".join(parts)
                    return data.decode() if kind == TEXT else data
            elif opcode != PONG:
                raise self._dropped()

    async def close(self) -> None:
        """The close handshake (1000), then the connection ends."""
        try:
            if self._closed is None:
                await self._send(CLOSE, struct.pack("!H", 1000))
                self._close_sent = True
                async with asyncio.timeout(CLOSE_WAIT):
                    while True:
                        await self.recv_message()
        except (WebSocketClosedError, OSError, TimeoutError):
            pass
        finally:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()

    async def _send(self, opcode: int, payload: bytes) -> None:
        if self._closed is not None:
            raise self._closed
        try:
            self._writer.write(frame(opcode, payload, os.urandom(4)))
            await self._writer.drain()
        except OSError as exc:
            raise self._dropped() from exc

    async def _frame(self) -> tuple[bool, int, bytes]:
        if self._closed is not None:
            raise self._closed
        try:
            first, second = await self._reader.readexactly(2)
            n = second & 0x7F
            if n == 126:
                n = struct.unpack("!H", await self._reader.readexactly(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", await self._reader.readexactly(8))[0]
            if second & 0x80 or (first & 0x08 and n > 125):  # masked, or a control frame
                raise self._dropped()  # over 125 bytes: no server's (RFC 6455 5.1, 5.5)
            if n > MAX_MESSAGE:  # never read (nor waited for): what it claims is not held
                raise await self._too_big()
            return bool(first & 0x80), first & 0x0F, await self._reader.readexactly(n)
        except (OSError, asyncio.IncompleteReadError) as exc:
            raise self._dropped() from exc

    async def _too_big(self) -> WebSocketClosedError:
        """A message over `MAX_MESSAGE`: the close the RFC says (1009), then the end."""
        with contextlib.suppress(OSError, WebSocketClosedError):
            await self._send(CLOSE, struct.pack("!H", 1009))
        self._close_sent = True
        self._closed = WebSocketClosedError(
            f"websocket closed (1009): the server sent a message over {MAX_MESSAGE} bytes",
            close_code=1009,
        )
        return self._closed

    def _dropped(self) -> WebSocketClosedError:
        self._closed = WebSocketClosedError("websocket closed (1006)", close_code=1006)
        return self._closed


async def _handshake(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, url: str, headers: dict[str, str]
) -> None:
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    key = base64.b64encode(os.urandom(16))
    lines = [
        f"GET {target} HTTP/1.1",
        f"Host: {parts.netloc}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key.decode()}",
        "Sec-WebSocket-Version: 13",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *fields = head[:-4].split(b"\r\n")
    version, status = (status_line.split(None, 2) + [b""])[:2]
    if not version.startswith(b"HTTP/") or not status.isdigit():
        raise ValueError(f"not an HTTP response: {status_line[:80]!r}")
    answer = {}
    for line in fields:
        name, _, value = line.partition(b":")
        answer[name.strip().lower()] = value.strip()
    if int(status) != 101:
        length = min(int(answer.get(b"content-length", b"0") or 0), BODY_LIMIT)
        body = await reader.readexactly(length) if length else b""
        raise error_from_response(int(status), body)
    if answer.get(b"sec-websocket-accept") != accept_key(key):
        raise ValueError("the server's Sec-WebSocket-Accept does not match the key sent")


@asynccontextmanager
async def plain_connector(url: str, headers: dict[str, str]) -> AsyncIterator[PlainWebSocket]:
    """Open a `ws://` WebSocket (an `sdk._websocket.WebSocketConnector`): a refused handshake
    raises the API's error, an unreachable server `ConnectionFailedError`."""
    parts = urlsplit(url)
    if parts.scheme != "ws" or parts.hostname is None:
        raise ValueError(f"not a ws:// URL: {url}")
    try:
        reader, writer = await asyncio.open_connection(
            parts.hostname, parts.port or 80, limit=HEAD_LIMIT
        )
    except OSError as exc:
        raise ConnectionFailedError(
            f"cannot reach {url}: is `sanbox server` running? ({exc})", code="connection_failed"
        ) from exc
    try:
        await _handshake(reader, writer, url, headers)
    except BaseException as exc:
        writer.close()
        if isinstance(exc, (OSError, ValueError, EOFError, asyncio.LimitOverrunError)):
            raise ConnectionFailedError(
                f"cannot reach {url}: the WebSocket handshake failed ({exc})",
                code="connection_failed",
            ) from exc
        raise
    ws = PlainWebSocket(reader, writer)
    try:
        yield ws
    finally:
        await ws.close()
