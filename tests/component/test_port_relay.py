"""The port relay end to end: uvicorn -> relay -> TCP stream -> a local "guest" server."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import queue
import socket
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from http import HTTPStatus

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.http11 import Request, Response
from websockets.sync.client import connect
from websockets.typing import Subprotocol

from sanbox.api.ports import PortHost, parse_port_host, relay_http, relay_websocket

pytestmark = pytest.mark.component

MIB = 1024 * 1024


class TcpByteStream:
    """The ByteStream the agent would give, over a plain TCP connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def write(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def read(self, n: int = 65536, *, timeout: float | None = None) -> bytes:
        return await asyncio.wait_for(self._reader.read(n), timeout)

    async def close_write(self) -> None:
        if self._writer.can_write_eof():
            self._writer.write_eof()

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


# --- the "guest": a hand-written HTTP/1.1 server and a websockets echo server ---------------------


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    if headers.get("transfer-encoding") != "chunked":
        return b""
    body = bytearray()
    while size := int((await reader.readline()).strip(), 16):
        body += await reader.readexactly(size)
        await reader.readline()
    while (await reader.readline()).strip():
        pass
    return bytes(body)


def _response(status: str, body: bytes, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", f"content-length: {len(body)}", *headers, "", ""]
    return "\r\n".join(head).encode() + body


async def _guest_http(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, events: queue.Queue[str]
) -> None:
    try:
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:] if line)
        body = await _read_body(reader, headers)
        if target == "/close":
            return
        if target == "/silent":
            await asyncio.wait_for(reader.read(), 10)  # until the relay gives up and closes
            events.put("silent: relay closed")
            return
        if target == "/forever":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
            with contextlib.suppress(ConnectionError):
                for _ in range(500):
                    writer.write(b"data: tick\n\n")
                    await writer.drain()
                    await asyncio.sleep(0.01)
            events.put("forever: relay closed")
            return
        if target == "/garbage":
            writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        elif target == "/chunked":
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            for part in (b"one,", b"two,", b"three"):
                writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        elif target == "/eof":
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n"
            )
            writer.write(b"until the end" * 1000)
        elif target == "/echo":
            digest = hashlib.sha256(body).hexdigest()
            writer.write(_response("200 OK", body, f"x-sha256: {digest}"))
        else:
            seen = {"method": method, "target": target, "headers": headers, "body": body.decode()}
            data = json.dumps(seen).encode()
            writer.write(_response("200 OK", data, "content-type: application/json", "x-a: b"))
        await writer.drain()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _guest_ws(ws: ServerConnection, closes: queue.Queue[tuple[int, str]]) -> None:
    assert ws.request is not None
    await ws.send(f"hello {ws.request.path} {ws.subprotocol} {ws.request.headers.get('x-token')}")
    try:
        async for message in ws:
            if message == "close-me":
                await ws.close(4001, "bye")
            elif message == "ping-me":
                await asyncio.wait_for(await ws.ping(), 5)
                await ws.send("ponged")
            else:
                await ws.send(message)
    except ConnectionClosed:
        pass
    finally:
        if ws.close_code is not None:
            closes.put((ws.close_code, ws.close_reason or ""))


def _chat_if_offered(_ws: ServerConnection, offered: Sequence[str]) -> Subprotocol | None:
    return Subprotocol("chat") if "chat" in offered else None


def _refuse(ws: ServerConnection, request: Request) -> Response | None:
    if request.path == "/refuse":
        return ws.respond(HTTPStatus.FORBIDDEN, "no\n")
    return None


# --- the relaying app, served by uvicorn in a thread ----------------------------------------------


class _PortEndpoint:
    """The catch-all route: dial the guest port, relay, close the stream."""

    def __init__(self, port: int) -> None:
        self.port = port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = TcpByteStream(*await asyncio.open_connection("127.0.0.1", self.port))
        try:
            host = f"127.0.0.1:{self.port}"
            if scope["type"] == "websocket":
                await relay_websocket(scope, receive, send, stream, host_header=host)
            else:
                await relay_http(scope, receive, send, stream, host_header=host, head_timeout=1)
        finally:
            await stream.close()


def _relaying_app(http_port: int, ws_port: int) -> Starlette:
    return Starlette(
        routes=[
            Route("/{path:path}", _PortEndpoint(http_port)),
            WebSocketRoute("/{path:path}", _PortEndpoint(ws_port)),
        ]
    )


@dataclass
class Relay:
    url: str
    ws_url: str
    ws_closes: queue.Queue[tuple[int, str]]
    http_events: queue.Queue[str]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def _servers(relay: Relay, port: int) -> AsyncIterator[None]:
    guest_http = await asyncio.start_server(
        lambda r, w: _guest_http(r, w, relay.http_events), "127.0.0.1", 0
    )
    http_port = guest_http.sockets[0].getsockname()[1]
    async with (
        guest_http,
        serve(
            lambda ws: _guest_ws(ws, relay.ws_closes),
            "127.0.0.1",
            0,
            process_request=_refuse,
            select_subprotocol=_chat_if_offered,
            max_size=4 * MIB,
        ) as guest_ws,
    ):
        ws_port = next(iter(guest_ws.sockets)).getsockname()[1]
        config = uvicorn.Config(
            _relaying_app(http_port, ws_port),
            host="127.0.0.1",
            port=port,
            ws="websockets-sansio",
            lifespan="off",
            log_level="error",
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        try:
            while not server.started:
                await asyncio.sleep(0.01)
                if task.done():
                    task.result()
            yield
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, 10)


@pytest.fixture(scope="module")
def relay() -> Iterator[Relay]:
    port = _free_port()
    relay = Relay(
        f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}", queue.Queue(), queue.Queue()
    )
    ready = threading.Event()
    stop: asyncio.Event | None = None
    loop: asyncio.AbstractEventLoop | None = None
    errors: list[BaseException] = []

    async def main() -> None:
        nonlocal stop, loop
        stop, loop = asyncio.Event(), asyncio.get_running_loop()
        async with _servers(relay, port):
            ready.set()
            await stop.wait()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            errors.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=run, name="port-relay-servers")
    thread.start()
    assert ready.wait(10)
    assert not errors, errors
    try:
        yield relay
    finally:
        assert loop is not None and stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(15)
        assert not errors, errors


@pytest.fixture
def client(relay: Relay) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=relay.url, timeout=10) as http:
        yield http


# --- HTTP -----------------------------------------------------------------------------------------


def test_get_with_content_length(client: httpx.Client) -> None:
    r = client.get(
        "/some/p%61th?x=1&y=%20", headers={"X-Token": "t", "Connection": "x-drop", "X-Drop": "1"}
    )
    assert r.status_code == 200
    assert r.headers["x-a"] == "b"
    seen = r.json()
    assert seen["method"] == "GET"
    assert seen["target"] == "/some/p%61th?x=1&y=%20"
    headers = seen["headers"]
    assert headers["host"].startswith("127.0.0.1:")
    assert headers["host"] != client.base_url.netloc.decode()
    assert headers["connection"] == "close"
    assert headers["x-token"] == "t"
    assert "x-drop" not in headers
    assert headers["x-forwarded-host"] == client.base_url.netloc.decode()
    assert headers["x-forwarded-proto"] == "http"
    assert "content-length" not in headers and "transfer-encoding" not in headers


def test_chunked_response(client: httpx.Client) -> None:
    with client.stream("GET", "/chunked") as r:
        assert r.status_code == 200
        assert r.read() == b"one,two,three"


def test_response_ending_at_eof(client: httpx.Client) -> None:
    r = client.get("/eof")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain"
    assert r.content == b"until the end" * 1000


def test_post_echo_of_1mib_with_content_length(client: httpx.Client) -> None:
    body = bytes(range(256)) * (4 * 1024)
    assert len(body) == MIB
    r = client.post("/echo", content=body)
    assert r.status_code == 200
    assert r.headers["x-sha256"] == hashlib.sha256(body).hexdigest()
    assert r.content == body


def test_post_echo_of_chunked_body(client: httpx.Client) -> None:
    parts = [b"a" * 100_000, b"b" * 300_000, b"c" * 5]
    r = client.post("/echo", content=iter(parts))
    assert r.status_code == 200
    assert r.content == b"".join(parts)


def test_post_form_body_is_relayed(client: httpx.Client) -> None:
    seen = client.post("/form", data={"k": "v"}).json()
    assert seen["method"] == "POST"
    assert seen["body"] == "k=v"
    assert seen["headers"]["content-length"] == "3"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/close", "the port closed the connection without answering"),
        ("/garbage", "the port did not answer with HTTP"),
    ],
)
def test_bad_gateway_when_the_guest_does_not_answer_http(
    client: httpx.Client, path: str, message: str
) -> None:
    r = client.get(path)
    assert r.status_code == 502
    assert r.json() == {"error": {"code": "bad_gateway", "message": message}}


def test_gateway_timeout_when_the_guest_is_silent(relay: Relay, client: httpx.Client) -> None:
    r = client.get("/silent")
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "gateway_timeout"
    assert relay.http_events.get(timeout=5) == "silent: relay closed"


def test_client_leaving_an_endless_response_closes_the_guest_stream(
    relay: Relay, client: httpx.Client
) -> None:
    with client.stream("GET", "/forever") as r:
        assert r.headers["content-type"] == "text/event-stream"
        chunks = r.iter_bytes()
        assert next(chunks).startswith(b"data: tick")
    assert relay.http_events.get(timeout=5) == "forever: relay closed"


# --- WebSocket ------------------------------------------------------------------------------------


def test_websocket_relays_messages_both_ways(relay: Relay) -> None:
    with connect(
        f"{relay.ws_url}/chat?room=1",
        subprotocols=[Subprotocol("chat")],
        additional_headers={"X-Token": "secret"},
        max_size=4 * MIB,
        open_timeout=5,
    ) as ws:
        assert ws.subprotocol == "chat"
        assert ws.recv(timeout=5) == "hello /chat?room=1 chat secret"
        ws.send("text ✓")
        assert ws.recv(timeout=5) == "text ✓"
        ws.send(b"\x00\xffbinary")
        assert ws.recv(timeout=5) == b"\x00\xffbinary"
        big = b"x" * (3 * MIB)
        ws.send(big)
        assert ws.recv(timeout=5) == big
        ws.send("ping-me")  # the guest pings the relay, which answers
        assert ws.recv(timeout=5) == "ponged"
        ws.ping().wait(5)  # the relay answers our pings
        ws.close(4002, "done here")
    assert relay.ws_closes.get(timeout=5) == (4002, "done here")


def test_websocket_close_code_from_the_guest(relay: Relay) -> None:
    with connect(f"{relay.ws_url}/x", open_timeout=5) as ws:
        assert ws.subprotocol is None
        assert ws.recv(timeout=5) == "hello /x None None"
        ws.send("close-me")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=5)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4001, "bye")
    assert relay.ws_closes.get(timeout=5) == (4001, "bye")


def test_websocket_guest_failure_reaches_the_client(relay: Relay) -> None:
    with connect(f"{relay.ws_url}/x", max_size=None, open_timeout=5) as ws:
        ws.recv(timeout=5)
        ws.send(b"x" * (5 * MIB))  # over the guest's max_size: it fails the connection
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    # The guest drops TCP right after its close frame, so it never sees the relay's answer.
    assert relay.ws_closes.get(timeout=5)[0] in (1006, 1009)


def test_websocket_refused_by_the_guest(relay: Relay) -> None:
    with pytest.raises(InvalidStatus) as refused:
        connect(f"{relay.ws_url}/refuse", open_timeout=5)
    assert refused.value.response.status_code == 502
    assert json.loads(refused.value.response.body)["error"]["code"] == "bad_gateway"


# --- hosts ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("8080-demo.localhost:7070", PortHost(8080, "demo")),
        ("8080-demo.localhost", PortHost(8080, "demo")),
        ("8080-DEMO.LocalHost.", PortHost(8080, "demo")),
        ("1-my-app-2.localhost:7070", PortHost(1, "my-app-2")),
        ("65535-x.localhost", PortHost(65535, "x")),
        ("8080-demo.acme.localhost:7070", PortHost(8080, "demo", "acme")),
        ("8080-my-app.my-org.localhost", PortHost(8080, "my-app", "my-org")),
        ("65536-x.localhost", None),
        ("0-x.localhost", None),
        ("080-x.localhost", None),
        ("8080.localhost", None),
        ("8080-.localhost", None),
        ("8080-demo-.localhost", None),
        ("8080-de_mo.localhost", None),
        ("8080-" + "a" * 64 + ".localhost", None),
        ("8080-a.b-.localhost", None),
        ("8080-a.b.c.localhost", None),
        ("8080-a..localhost", None),
        ("8080-a.org\n.localhost", None),
        ("demo.localhost", None),
        ("localhost:7070", None),
        ("8080-demo.localhost:http", None),
        ("8080-demo.example.com", None),
    ],
)
def test_parse_port_host(host: str, expected: PortHost | None) -> None:
    assert parse_port_host(host) == expected


def test_parse_port_host_with_a_base_domain() -> None:
    assert parse_port_host("3000-box.sanbox.example.com:443", "sanbox.example.com") == PortHost(
        3000, "box"
    )
    assert parse_port_host("3000-box.o.sanbox.example.com", "sanbox.example.com") == PortHost(
        3000, "box", "o"
    )
    assert parse_port_host("3000-box.localhost", "sanbox.example.com") is None


def test_public_surface() -> None:
    import sanbox.api.ports as ports

    assert sorted(ports.__all__) == [
        "ByteStream",
        "PortHost",
        "parse_port_host",
        "relay_http",
        "relay_port_http",
        "relay_websocket",
    ]
