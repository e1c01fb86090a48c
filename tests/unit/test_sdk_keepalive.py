"""The SDK and a kept-alive connection the server closes without answering (its idle timeout
reached as a request went out): an idempotent request goes again, once, on a new connection; a
POST is not sent twice. Against a real socket server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from sanbox.sdk._http import KEEPALIVE_EXPIRY, HttpCore
from sanbox.sdk.errors import ConnectionFailedError

pytestmark = pytest.mark.unit

OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\n{"ok":1}'


class Server:
    """Answers requests on a connection until `answers` of them, then closes it unanswered at
    the next one (as a server whose keep-alive ran out does)."""

    def __init__(self, answers: int) -> None:
        self.answers = answers
        self.requests: list[str] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                line = head.split(b"\r\n", 1)[0].decode()
                self.requests.append(line)
                length = [
                    int(h.split(b":", 1)[1])
                    for h in head.lower().split(b"\r\n")
                    if h.startswith(b"content-length:")
                ]
                if length:
                    await reader.readexactly(length[0])
                if answered == self.answers:
                    break  # closed with the request unanswered
                writer.write(OK)
                await writer.drain()
                answered += 1
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()


def served(server: Server, work: Callable[[HttpCore], Awaitable[None]]) -> None:
    async def run() -> None:
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        core = HttpCore(f"http://127.0.0.1:{port}", None, 5.0, None)
        try:
            await work(core)
        finally:
            await core.aclose()
            listener.close()
            await listener.wait_closed()

    asyncio.run(run())


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
def test_an_idempotent_request_goes_again_on_a_new_connection(method: str) -> None:
    server = Server(answers=1)

    async def work(core: HttpCore) -> None:
        assert await core.json(method, "/v1/a") == {"ok": 1}
        assert await core.json(method, "/v1/b") == {"ok": 1}  # dropped once, then answered

    served(server, work)
    assert server.requests == [f"{method} /v1/a HTTP/1.1", *[f"{method} /v1/b HTTP/1.1"] * 2]
    assert server.connections == 2


def test_a_post_is_never_sent_twice() -> None:
    server = Server(answers=1)

    async def work(core: HttpCore) -> None:
        await core.json("POST", "/v1/a", json_body={})
        with pytest.raises(ConnectionFailedError, match="disconnected"):
            await core.json("POST", "/v1/b", json_body={})

    served(server, work)
    assert server.requests == ["POST /v1/a HTTP/1.1", "POST /v1/b HTTP/1.1"]


def test_a_server_that_never_answers_is_tried_twice_then_said() -> None:
    server = Server(answers=0)

    async def work(core: HttpCore) -> None:
        with pytest.raises(ConnectionFailedError, match="is `sanbox server` running"):
            await core.json("GET", "/v1/a")

    served(server, work)
    assert server.requests == ["GET /v1/a HTTP/1.1"] * 2


def test_a_kept_alive_connection_expires_before_the_servers_idle_timeout() -> None:
    assert KEEPALIVE_EXPIRY < 5.0  # uvicorn's timeout_keep_alive, which `sanbox server` keeps
