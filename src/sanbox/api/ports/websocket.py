"""Relay one WebSocket from the ASGI server to a port inside a computer: a websockets sans-IO
``ClientProtocol`` toward the guest over the ``ByteStream`` the guest agent dialled (relay.py
says how, and relays plain HTTP)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from starlette.types import Message, Receive, Scope, Send
from websockets.client import ClientProtocol
from websockets.frames import EXTERNAL_CLOSE_CODES, CloseCode, Frame, Opcode
from websockets.protocol import Event, State
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from .relay import (
    ByteStream,
    ClientFilter,
    request_headers,
    request_target,
    run_until_first,
    send_error,
)

log = logging.getLogger(__name__)


async def relay_websocket(
    scope: Scope,
    receive: Receive,
    send: Send,
    stream: ByteStream,
    *,
    host_header: str,
    handshake_timeout: float = 30.0,
    close_timeout: float = 10.0,
    max_message_size: int = 16 * 2**20,
    client_filter: ClientFilter | None = None,
) -> None:
    """Relay one WebSocket between the ASGI peer and ``stream``.

    ``client_filter``, if given, sees the client's binary messages as one byte stream and says
    what of it goes on (view-only VNC: ``rfb.RfbViewOnly``); a text message, or bytes it refuses,
    close the connection (1008).

    The ASGI side is accepted, with the guest's subprotocol, only once the guest accepted; a guest
    that refuses gets the client a 502 (or, without the ``websocket.http.response`` extension, a
    close before accept, which servers answer with 403). Messages and close codes then flow both
    ways; each side answers its own pings. The relay ends when either side closes; after the
    client left it waits up to ``close_timeout`` for the guest to answer the close.
    """
    if (await receive())["type"] != "websocket.connect":
        return
    offered = [Subprotocol(s) for s in scope.get("subprotocols") or ()]
    uri = parse_uri(f"ws://{host_header}/")
    guest = ClientProtocol(uri, subprotocols=offered or None, max_size=max_message_size)
    request = guest.connect()
    request.path = request_target(scope).decode("latin-1")
    for name, value in request_headers(scope, host_header)[1:]:
        request.headers[name.decode("latin-1")] = value.decode("latin-1")
    guest.send_request(request)
    relay = _WebSocketRelay(guest, receive, send, stream, client_filter=client_filter)
    try:
        await relay.flush()
        await relay.handshake(handshake_timeout)
    except Exception as exc:
        guest.handshake_exc = guest.handshake_exc or exc
    if guest.handshake_exc is not None or guest.state is not State.OPEN:
        log.info("relay to %s: websocket refused: %r", host_header, guest.handshake_exc)
        await _refuse_websocket(scope, send, f"the port refused: {guest.handshake_exc}")
        return
    await send({"type": "websocket.accept", "subprotocol": guest.subprotocol})
    await run_until_first(relay.to_guest(close_timeout), relay.to_client())


async def _refuse_websocket(scope: Scope, send: Send, message: str) -> None:
    if "websocket.http.response" not in (scope.get("extensions") or {}):
        await send({"type": "websocket.close", "code": 1011})
        return
    await send_error(send, 502, "bad_gateway", message, "websocket.http")


def _sendable(code: int | None) -> int | None:
    """``code`` if it may go in a close frame; None for 1005 (no status), 1006 (abnormal), ..."""
    if code is not None and (code in EXTERNAL_CLOSE_CODES or 3000 <= code < 5000):
        return code
    return None


@dataclass
class _WebSocketRelay:
    guest: ClientProtocol
    receive: Receive
    send: Send
    stream: ByteStream
    client_gone: bool = False
    guest_done: asyncio.Event = field(default_factory=asyncio.Event)
    pending: list[Event] = field(default_factory=list)
    parts: list[bytes] = field(default_factory=list)
    opcode: Opcode = Opcode.BINARY
    client_filter: ClientFilter | None = None

    async def flush(self) -> None:
        for data in self.guest.data_to_send():
            if data:
                await self.stream.write(data)
            else:
                await self.stream.close_write()

    async def feed(self, timeout: float | None) -> None:
        """Read from the guest once and feed the protocol; it answers pings and closes itself."""
        data = await self.stream.read(timeout=timeout)
        if data:
            self.guest.receive_data(data)
        else:
            self.guest.receive_eof()
        self.pending += self.guest.events_received()
        await self.flush()

    async def handshake(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.guest.state is State.CONNECTING and self.guest.handshake_exc is None:
            if (remaining := deadline - loop.time()) <= 0:
                raise TimeoutError(f"no handshake answer within {timeout:g} s")
            await self.feed(remaining)

    async def to_guest(self, close_timeout: float) -> None:
        """Client messages to the guest until the client leaves; then close toward the guest."""
        try:
            while (message := await self.receive())["type"] == "websocket.receive":
                if self.guest.state is not State.OPEN:
                    continue  # the guest is closing; to_client closes the client
                if self.client_filter is not None:
                    if not await self._filtered(message):
                        break
                elif (text := message.get("text")) is not None:
                    self.guest.send_text(text.encode())
                else:
                    self.guest.send_binary(message.get("bytes") or b"")
                await self.flush()
            self.client_gone = True
            if self.guest.state is State.OPEN:
                code = _sendable(message.get("code"))
                self.guest.send_close(code, (message.get("reason") or "") if code else "")
                await self.flush()
        except Exception as exc:  # the guest side broke: to_client sees it too
            log.info("websocket relay to the guest ended: %r", exc)
        # to_client reads the guest's answer; give it close_timeout to arrive.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(close_timeout):
                await self.guest_done.wait()

    async def _filtered(self, message: Message) -> bool:
        """Pass what the filter lets through; False (the client closed with 1008) if it refuses."""
        assert self.client_filter is not None
        data = message.get("bytes")
        try:
            if data is None:
                raise ValueError("text messages are not relayed here")
            passed = self.client_filter.feed(data)
        except Exception as exc:
            log.info("websocket relay: client input refused: %r", exc)
            self.client_gone = True
            with contextlib.suppress(OSError):
                await self.send({"type": "websocket.close", "code": 1008, "reason": "view only"})
            if self.guest.state is State.OPEN:
                self.guest.send_close(1008, "view only")
                await self.flush()
            return False
        if passed:
            self.guest.send_binary(passed)
        return True

    def _reading(self) -> bool:
        """While open; once the client left, until the guest answers our close frame."""
        if self.client_gone and self.guest.close_rcvd is None:
            return self.guest.state in (State.OPEN, State.CLOSING)
        return self.guest.state is State.OPEN

    async def to_client(self) -> None:
        """Guest messages to the client until the guest closes; then close toward the client."""
        try:
            while True:
                for event in self.pending:
                    if isinstance(event, Frame):
                        await self._forward(event)
                self.pending.clear()
                if not self._reading():
                    break
                await self.feed(None)
        except Exception as exc:
            log.info("websocket relay to the client ended: %r", exc)
        finally:
            self.guest_done.set()
        if self.client_gone:
            return
        close = self.guest.close_rcvd or self.guest.close_sent
        code = _sendable(close.code if close else None)
        if code is None:
            code = 1000 if close and close.code == CloseCode.NO_STATUS_RCVD else 1011
        reason = close.reason if close and code == close.code else ""
        with contextlib.suppress(OSError):
            await self.send({"type": "websocket.close", "code": code, "reason": reason})

    async def _forward(self, frame: Frame) -> None:
        if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
            self.opcode, self.parts = frame.opcode, []
        elif frame.opcode is not Opcode.CONT:
            return
        self.parts.append(bytes(frame.data))
        if not frame.fin or self.client_gone:
            return
        data, self.parts = b"".join(self.parts), []
        if self.opcode is Opcode.TEXT:
            await self.send({"type": "websocket.send", "text": data.decode()})
        else:
            await self.send({"type": "websocket.send", "bytes": data})
