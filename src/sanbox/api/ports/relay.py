"""Relay one HTTP request from the ASGI server to a port inside a computer (a WebSocket:
websocket.py, which shares the helpers here).

There is no network path to the guest: each relayed connection is one ``ByteStream`` that the
guest agent dialled to ``127.0.0.1:<port>`` inside the guest; the caller opens it and closes it
after the relay returns. HTTP goes out as one HTTP/1.1 request (``Connection: close``) and comes
back through h11.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine, Iterable
from typing import Any, Protocol
from urllib.parse import quote

import h11
from starlette.types import Receive, Scope, Send

from ..forwarded import UNKNOWN, forwarded_proto, scope_client

log = logging.getLogger(__name__)

Headers = list[tuple[bytes, bytes]]

HOP_BY_HOP = frozenset(
    b"connection keep-alive proxy-authenticate proxy-authorization proxy-connection te trailer "
    b"trailers transfer-encoding upgrade".split()
)
# What the client may not tell the guest: Sanbox says where the request came from itself
_NOT_FORWARDED = frozenset(
    b"host expect forwarded x-forwarded-for x-forwarded-host x-forwarded-proto x-real-ip".split()
)
_OWN_COOKIES = frozenset(b"sanbox_port sanbox_console __host-sanbox_console".split())


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


def request_target(scope: Scope) -> bytes:
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


def guest_cookies(headers: Headers) -> Headers:
    """A guest's answer with its cookies kept to its own port's host: a `Domain` attribute is
    dropped (every port's host shares a parent domain: one port would set cookies on every other
    org's), and a cookie named as Sanbox's own (the port's, the console's) is not set at all."""
    kept: Headers = []
    for name, value in headers:
        if name.lower() != b"set-cookie":
            kept.append((name, value))
            continue
        cookie, *attributes = value.split(b";")
        if cookie.partition(b"=")[0].strip().lower() in _OWN_COOKIES:
            continue
        attributes = [a for a in attributes if a.partition(b"=")[0].strip().lower() != b"domain"]
        kept.append((name, b";".join([cookie, *attributes])))
    return kept


def request_headers(scope: Scope, host_header: str) -> Headers:
    """The client's headers for the guest: Host replaced, hop-by-hop dropped, and X-Forwarded-*
    as Sanbox knows them, never as the client wrote them: `X-Forwarded-For` the one address
    Sanbox believes the client's (the peer's, or a trusted proxy's report of it:
    `forwarded.scope_client`; a chain the client wrote would let it pose as any address to a
    guest that trusts the header), `X-Forwarded-Proto` the scheme the browser used (behind a
    trusted proxy that ends TLS, https: `forwarded.forwarded_proto`), `X-Forwarded-Host` its
    Host. A client's `Forwarded` and `X-Real-IP` are dropped too."""
    raw: Headers = list(scope.get("headers") or [])
    original_host = next((value for name, value in raw if name.lower() == b"host"), None)
    headers = [(b"host", host_header.encode("latin-1"))]
    headers += _without_hop_by_hop(raw, _NOT_FORWARDED)
    if original_host is not None:
        headers.append((b"x-forwarded-host", original_host))
    headers.append((b"x-forwarded-proto", forwarded_proto(scope).encode("latin-1")))
    client = scope_client(scope)
    if client != UNKNOWN:
        headers.append((b"x-forwarded-for", client.encode("latin-1")))
    return headers


async def run_until_first(*coros: Coroutine[Any, Any, Any]) -> None:
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
    headers = request_headers(scope, host_header)
    if not any(name.lower() == b"content-length" for name, _ in headers):
        if more:
            headers.append((b"transfer-encoding", b"chunked"))
        elif body or scope["method"] in ("POST", "PUT", "PATCH"):
            headers.append((b"content-length", str(len(body)).encode()))
    headers.append((b"connection", b"close"))
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=64 * 1024)
    try:
        head = conn.send(
            h11.Request(method=scope["method"], target=request_target(scope), headers=headers)
        )
        await stream.write(head + _encode_body(conn, body, more))
    except Exception as exc:
        log.info("relay to %s: request not sent: %r", host_header, exc)
        await send_error(send, 502, "bad_gateway", "cannot send the request to the port")
        return
    await run_until_first(
        _http_upload(conn, receive, stream, more),
        _http_download(conn, send, stream, host_header, head_timeout, read_timeout),
    )


def _encode_body(conn: h11.Connection, data: bytes, more: bool) -> bytes:
    out = (conn.send(h11.Data(data=data)) or b"") if data else b""
    return out if more else out + (conn.send(h11.EndOfMessage()) or b"")


async def send_error(send: Send, status: int, code: str, message: str, kind: str = "http") -> None:
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
        await send_error(send, 504, "gateway_timeout", message)
        return
    except Exception as exc:
        log.info("relay to %s: no response: %r", host_header, exc)
        message = str(exc) if isinstance(exc, EOFError) else "the port did not answer with HTTP"
        await send_error(send, 502, "bad_gateway", message)
        return
    headers = guest_cookies(_without_hop_by_hop(event.headers, frozenset()))
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
