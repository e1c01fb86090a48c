"""What the client takes from a server is bounded: a WebSocket message at `MAX_MESSAGE` (the SDK's
`websockets` connection and the fast path's own frames alike, a frame that claims more never
waited for), an error answer's body at `ERROR_BODY_LIMIT` (the SDK's and the quick path's plain
HTTP). The attack: a broken or hostile server (or whatever answers at its address) made the CLI
hold whatever it sent, up to the 2^63 bytes a frame's length can claim."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import AsyncIterator
from typing import cast

import httpx
import pytest

from sanbox.cli.plainhttp import exchange
from sanbox.cli.plainws import BINARY, CLOSE, CONTINUATION, TEXT, PlainWebSocket
from sanbox.sdk._http import HttpCore
from sanbox.sdk._websocket import MAX_MESSAGE, WebSocketClosedError, websockets_connector
from sanbox.sdk.errors import ERROR_BODY_LIMIT, SanboxError

pytestmark = pytest.mark.unit

MIB = 2**20


class _Wire:
    """The writing end of a connection, kept (a `StreamWriter` as PlainWebSocket uses one)."""

    def __init__(self) -> None:
        self.sent = bytearray()

    def write(self, data: bytes) -> None:
        self.sent += data

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass

    async def wait_closed(self) -> None:
        pass


def server_frame(
    opcode: int, payload: bytes, fin: bool = True, claimed: int | None = None
) -> bytes:
    """An unmasked server frame; `claimed` a length other than the payload's."""
    n = len(payload) if claimed is None else claimed
    first = (0x80 if fin else 0) | opcode
    if n < 126:
        return struct.pack("!BB", first, n) + payload
    if n < 1 << 16:
        return struct.pack("!BBH", first, 126, n) + payload
    return struct.pack("!BBQ", first, 127, n) + payload


def received(data: bytes) -> tuple[str | bytes | WebSocketClosedError, bytes]:
    """What PlainWebSocket makes of `data` (then the connection's end): the message or the
    error, and what it sent back."""

    async def run() -> tuple[str | bytes | WebSocketClosedError, bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        wire = _Wire()
        ws = PlainWebSocket(reader, cast(asyncio.StreamWriter, wire))
        try:
            async with asyncio.timeout(30):
                return await ws.recv_message(), bytes(wire.sent)
        except WebSocketClosedError as exc:
            return exc, bytes(wire.sent)

    return asyncio.run(run())


def close_code(sent: bytes) -> int:
    """The code of the masked close frame the client sent."""
    assert sent[0] == 0x80 | CLOSE and sent[1] == 0x80 | 2
    mask, payload = sent[2:6], sent[6:8]
    return int(struct.unpack("!H", bytes(b ^ mask[i] for i, b in enumerate(payload)))[0])


def test_a_frame_that_claims_more_than_a_message_is_refused_unread() -> None:
    message, sent = received(server_frame(BINARY, b"", claimed=2**62))
    assert isinstance(message, WebSocketClosedError) and message.close_code == 1009
    assert close_code(sent) == 1009


def test_fragments_that_add_up_past_a_message_are_refused() -> None:
    piece = b"x" * MIB
    frames = [server_frame(TEXT, piece, fin=False)]
    frames += [server_frame(CONTINUATION, piece, fin=False)] * (MAX_MESSAGE // MIB)
    message, sent = received(b"".join(frames))
    assert isinstance(message, WebSocketClosedError) and message.close_code == 1009
    assert close_code(sent) == 1009


def test_a_message_within_the_bound_is_taken() -> None:
    body = b"y" * (4 * MIB)
    frames = server_frame(BINARY, body[: 2 * MIB], fin=False)
    frames += server_frame(CONTINUATION, body[2 * MIB :])
    assert received(frames) == (body, b"")


def test_the_sdks_websocket_refuses_a_message_over_the_bound() -> None:
    from websockets.asyncio.server import ServerConnection, serve

    async def handler(connection: ServerConnection) -> None:
        await connection.send(b"z" * (MAX_MESSAGE + 1))
        await connection.wait_closed()

    async def run() -> int:
        async with serve(handler, "127.0.0.1", 0, max_size=None) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            async with websockets_connector(f"ws://127.0.0.1:{port}/", {}) as ws:
                with pytest.raises(WebSocketClosedError) as closed:
                    async with asyncio.timeout(30):
                        await ws.recv_message()
        return closed.value.close_code

    assert asyncio.run(run()) == 1009


def test_the_sdk_reads_an_error_body_no_further_than_its_bound() -> None:
    pulled: list[int] = []

    async def endless() -> AsyncIterator[bytes]:
        for n in range(64):  # 64 MiB, were it all read
            pulled.append(n)
            yield b'{"error": ' + b" " * (MIB - 10)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, content=endless())

    async def run() -> None:
        core = HttpCore("http://sanbox.test", None, 5.0, httpx.MockTransport(answer))
        try:
            with pytest.raises(SanboxError) as raised:
                await core.request("GET", "/v1/computers")
            assert raised.value.status == 500 and len(raised.value.message) <= 500
            assert len(pulled) <= 2
            pulled.clear()
            with pytest.raises(SanboxError):
                async with core.stream("GET", "/v1/computers/c/files"):
                    pass
            assert len(pulled) <= 2
        finally:
            await core.aclose()

    asyncio.run(run())


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "up-to-the-close"])
def test_the_quick_path_reads_an_error_body_no_further_than_its_bound(length: bool) -> None:
    size = 32 * MIB
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            while b"\r\n\r\n" not in connection.recv(65536):
                pass
            stated = f"Content-Length: {size}\r\n" if length else ""
            head = f"HTTP/1.1 500 Internal Server Error\r\n{stated}\r\n".encode()
            with contextlib.suppress(OSError):  # the client read what it takes and went
                connection.sendall(head + b"e" * size)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    head = b"GET /v1/computers HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    try:
        status, body = exchange("127.0.0.1", listener.getsockname()[1], head, b"", 10)
    finally:
        thread.join(10)
        listener.close()
    assert status == 500 and len(body) == ERROR_BODY_LIMIT
