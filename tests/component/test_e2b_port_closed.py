"""A `get_host()` port nothing listens on answers as E2B's proxy does: 502 with its JSON
(`{"sandboxId", "message": "The sandbox is running but port is not open", "port", "code": 502}`),
so a program polling the URL for its server to come up waits on while it says so; once the server
listens, the same URL reaches it. A WebSocket request to such a port is answered the same, in HTTP
before its upgrade (it was upgraded, then closed 1008), as E2B's proxy answers it."""

from __future__ import annotations

import socket
import threading

import pytest
from starlette.testclient import WebSocketDenialResponse

from .conftest import E2bStand

pytestmark = pytest.mark.component


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def closed_port(e2b: E2bStand, public: bool) -> tuple[str, int, dict[str, str]]:
    """A new sandbox (its ports public or behind its traffic token), a port of it nothing
    listens on, and the headers that reach that port."""
    made = e2b.client.post(
        "/e2b/sandboxes",
        headers=e2b.api,
        json={"templateID": "base", "network": {"allowPublicTraffic": public}},
    )
    assert made.status_code == 201, made.text
    sandbox = made.json()["sandboxID"]
    token = {} if public else {"e2b-traffic-access-token": made.json()["trafficAccessToken"]}
    port = free_port()
    return sandbox, port, {"host": f"{port}-{sandbox}.localhost", **token}


@pytest.mark.parametrize("public", [True, False])
def test_a_closed_port_answers_502_in_e2b_s_words(e2b: E2bStand, public: bool) -> None:
    sandbox, port, host = closed_port(e2b, public)

    closed = e2b.client.get("/", headers=host)
    assert closed.status_code == 502, closed.text
    assert closed.headers["content-type"].startswith("application/json")
    assert closed.json() == {
        "sandboxId": sandbox,
        "message": "The sandbox is running but port is not open",
        "port": port,
        "code": 502,
    }

    listener = socket.create_server(("127.0.0.1", port))  # the program's server comes up

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nup")

    server = threading.Thread(target=answer, daemon=True)
    server.start()
    try:
        assert e2b.client.get("/", headers=host).text == "up"
    finally:
        server.join(10)
        listener.close()


@pytest.mark.parametrize("public", [True, False])
def test_a_websocket_to_a_closed_port_answers_502_before_its_upgrade(
    e2b: E2bStand, public: bool
) -> None:
    sandbox, port, host = closed_port(e2b, public)

    with (
        pytest.raises(WebSocketDenialResponse) as denied,
        e2b.client.websocket_connect("/socket", headers=host),
    ):
        pass
    assert denied.value.status_code == 502
    assert denied.value.headers["content-type"].startswith("application/json")
    assert denied.value.json() == {
        "sandboxId": sandbox,
        "message": "The sandbox is running but port is not open",
        "port": port,
        "code": 502,
    }
