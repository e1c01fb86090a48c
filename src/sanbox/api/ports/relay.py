"""Relay one HTTP request or one WebSocket from the ASGI server to a port inside a computer.

There is no network path to the guest: each relayed connection is one ``ByteStream`` that the
guest agent dialled to ``127.0.0.1:<port>`` inside the guest; the caller opens it and closes it
after the relay returns. HTTP goes out as one HTTP/1.1 request (``Connection: close``) and comes
back through h11; a WebSocket is a websockets sans-IO ``ClientProtocol`` toward the guest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

import h11
from starlette.types import Message, Receive, Scope, Send
from websockets.client import ClientProtocol
from websockets.frames import EXTERNAL_CLOSE_CODES, CloseCode, Frame, Opcode
from websockets.protocol import Event, State
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

log = logging.getLogger(__name__)

Headers = list[tuple[bytes, bytes]]

HOP_BY_HOP = frozenset(
    b"connection keep-alive proxy-authenticate proxy-authorization proxy-connection te trailer "
    b"trailers transfer-encoding upgrade".split()
)
_NOT_FORWARDED = frozenset(b"host expect x-forwarded-host x-forwarded-proto".split())


class ClientFilter(Protocol):
    """What of the client's byte stream may reach the guest (``feed`` raises to refuse)."""

    def feed(self, data: bytes) -> bytes: ...


class ByteStream(Protocol):
    """A byte stream to a port inside the guest (``sanbox.host.agent.tcp.TcpStream``): ``read``
    gives up to ``n`` bytes, ``b""`` at end of stream, TimeoutError once ``timeout`` ran out."""

    async def write(self, data: bytes) -> None: ...

    async def read(self, n: int = 65536, *, timeout: float | None = None) -> bytes: ...

    async def close_write(self) -> None: ...

    async def close(self) -> None: ...


def _target(scope: Scope) -> bytes:
    raw_path = scope.get("raw_path") or quote(scope.get("path") or "/").encode("ascii")
    query = scope.get("query_string") or b""
    return raw_path + b"?" + query if query else raw_path


def _without_hop_by_hop(headers: Iterable[tuple[bytes, bytes]], also: frozenset[bytes]) -> Headers:
    """Without hop-by-hop headers (those named in Connection too), ``also`` and Sec-WebSocket-*."""
    headers = list(headers)
    drop = set(HOP_BY_HOP | also)
    for name, value in headers:
        if name.lower() == b"connection":
            drop.update(token.strip().lower() for token in value.split(b","))
    kept = [(name, value) for name, value in headers if name.lower() not in drop]
    return [(name, value) for name, value in kept if not name.startswith(b"sec-websocket-")]


def _request_headers(scope: Scope, host_header: str) -> Headers:
    """The client's headers for the guest: Host replaced, hop-by-hop dropped, X-Forwarded-*."""
    raw: Headers = list(scope.get("headers") or [])
    original_host = next((value for name, value in raw if name.lower() == b"host"), None)
    headers = [(b"host", host_header.encode("latin-1"))]
    headers += _without_hop_by_hop(raw, _NOT_FORWARDED)
    if original_host is not None:
        headers.append((b"x-forwarded-host", original_host))
    secure = scope.get("scheme") in ("https", "wss")
    headers.append((b"x-forwarded-proto", b"https" if secure else b"http"))
    return headers


async def _run_until_first(*coros: Coroutine[Any, Any, Any]) -> None:
    """Run ``coros`` as tasks until the first one ends, then cancel the others."""
    tasks = [asyncio.create_task(coro) for coro in coros]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        while not all(task.done() for task in tasks):
            for task in tasks:  # again and again: a task may swallow one (3.11 wait_for did)
                task.cancel()
            await asyncio.wait(tasks, timeout=0.1)
        await asyncio.gather(*tasks, return_exceptions=True)  # retrieved: none left unobserved
    for task in done:
        task.result()


async def relay_http(
    scope: Scope,
    receive: Receive,
    send: Send,
    stream: ByteStream,
    *,
    host_header: str,
    head_timeout: float = 300.0,
    read_timeout: float = 300.0,
) -> None:
    """Relay one HTTP request to ``stream`` and the guest's response back to the ASGI peer.

    ``host_header`` is what the guest sees as Host (``127.0.0.1:8080``). ``head_timeout`` bounds
    the wait for the response head (five minutes: an agent's server may answer only when a model
    turn ends), ``read_timeout`` each wait for more of the response body. A response that breaks
    off after its head is left incomplete, so the server aborts it.
    """
    first = await receive()
    if first["type"] == "http.disconnect":
        return
    body: bytes = first.get("body", b"")
    more: bool = first.get("more_body", False)
    headers = _request_headers(scope, host_header)
    if not any(name.lower() == b"content-length" for name, _ in headers):
        if more:
            headers.append((b"transfer-encoding", b"chunked"))
        elif body or scope["method"] in ("POST", "PUT", "PATCH"):
            headers.append((b"content-length", str(len(body)).encode()))
    headers.append((b"connection", b"close"))
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=64 * 1024)
    try:
        head = conn.send(
            h11.Request(method=scope["method"], target=_target(scope), headers=headers)
        )
        await stream.write(head + _encode_body(conn, body, more))
    except Exception as exc:
        log.info("relay to %s: request not sent: %r", host_header, exc)
        await _send_error(send, 502, "bad_gateway", "cannot send the request to the port")
        return
    await _run_until_first(
        _http_upload(conn, receive, stream, more),
        _http_download(conn, send, stream, host_header, head_timeout, read_timeout),
    )


def _encode_body(conn: h11.Connection, data: bytes, more: bool) -> bytes:
    out = (conn.send(h11.Data(data=data)) or b"") if data else b""
    return out if more else out + (conn.send(h11.EndOfMessage()) or b"")


async def _send_error(send: Send, status: int, code: str, message: str, kind: str = "http") -> None:
    """A JSON error response; ``kind`` "websocket.http" for the WebSocket denial extension."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": f"{kind}.response.start", "status": status, "headers": headers})
    await send({"type": f"{kind}.response.body", "body": body})


async def _http_upload(
    conn: h11.Connection, receive: Receive, stream: ByteStream, more: bool
) -> None:
    """Stream the rest of the request body, then return once the client disconnects."""
    try:
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            more = message.get("more_body", False)
            await stream.write(_encode_body(conn, message.get("body", b""), more))
    except Exception as exc:  # the guest may answer without reading it all: keep listening
        log.debug("request body not fully sent: %r", exc)
    while (await receive())["type"] != "http.disconnect":
        pass


async def _next_event(conn: h11.Connection, stream: ByteStream, deadline: float) -> Any:
    loop = asyncio.get_running_loop()
    while (event := conn.next_event()) is h11.NEED_DATA:
        if (remaining := deadline - loop.time()) <= 0:
            raise TimeoutError
        data = await stream.read(timeout=remaining)
        if not data and conn.their_state is h11.SEND_RESPONSE and not conn.trailing_data[0]:
            raise EOFError("the port closed the connection without answering")
        conn.receive_data(data)
    return event


async def _http_download(
    conn: h11.Connection,
    send: Send,
    stream: ByteStream,
    host_header: str,
    head_timeout: float,
    read_timeout: float,
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + head_timeout
    try:
        event = await _next_event(conn, stream, deadline)
        while isinstance(event, h11.InformationalResponse):
            event = await _next_event(conn, stream, deadline)
    except TimeoutError:
        message = f"the port did not answer within {head_timeout:g} s"
        await _send_error(send, 504, "gateway_timeout", message)
        return
    except Exception as exc:
        log.info("relay to %s: no response: %r", host_header, exc)
        message = str(exc) if isinstance(exc, EOFError) else "the port did not answer with HTTP"
        await _send_error(send, 502, "bad_gateway", message)
        return
    headers = _without_hop_by_hop(event.headers, frozenset())
    await send({"type": "http.response.start", "status": event.status_code, "headers": headers})
    try:
        while True:
            event = await _next_event(conn, stream, loop.time() + read_timeout)
            if isinstance(event, h11.EndOfMessage):
                break
            if not isinstance(event, h11.Data):
                raise h11.RemoteProtocolError(f"unexpected {type(event).__name__}")
            await send({"type": "http.response.body", "body": bytes(event.data), "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    except Exception as exc:
        log.info("relay to %s: response broke off: %r", host_header, exc)


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
    request.path = _target(scope).decode("latin-1")
    for name, value in _request_headers(scope, host_header)[1:]:
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
    await _run_until_first(relay.to_guest(close_timeout), relay.to_client())


async def _refuse_websocket(scope: Scope, send: Send, message: str) -> None:
    if "websocket.http.response" not in (scope.get("extensions") or {}):
        await send({"type": "websocket.close", "code": 1011})
        return
    await _send_error(send, 502, "bad_gateway", message, "websocket.http")


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
