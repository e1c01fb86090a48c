"""Connections to published ports are bounded like the API's open requests: one a key or its port
cookie opened holds a place of that key and its org (the same places the API's requests take),
and one to a public port, which shows no key, a place of its computer's. Past either, 429
`too_many_open_requests` before anything reaches the guest; a place comes back when its
connection ends."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from .conftest import Server, local_app
from .test_published_access import get, guest_echo, opened_by, publish

pytestmark = pytest.mark.component


@pytest.fixture
def bounded(short_tmp: Path) -> Iterator[Server]:
    """A server whose keys hold 2 open requests each and whose computers' public ports 2."""
    app, dd = local_app(short_tmp, open_requests_per_key=2, public_port_connections=2)
    with TestClient(app) as client:
        yield Server(client, app.state.first_key, dd, app.state.settings)


def refused(server: Server, headers: dict[str, str]) -> None:
    """A WebSocket to the port is refused before it opens, and a page load answered 429."""
    with pytest.raises(WebSocketDisconnect), server.client.websocket_connect("/", headers=headers):
        pass
    r = get(server, headers["host"], **{k: v for k, v in headers.items() if k != "host"})
    assert r.status_code == 429, r.text
    assert r.json()["error"]["code"] == "too_many_open_requests"
    assert r.headers["retry-after"]


def test_a_key_s_port_connections_hold_its_places(bounded: Server) -> None:
    made = bounded.client.post("/v1/keys", json={"name": "ws"}, headers=bounded.headers())
    key = made.json()["key"]
    with guest_echo() as port:
        publish(bounded, key, "held", port, public=False)
        host = f"{port}-held.localhost:7070"
        by_key, by_cookie = (opened_by(bounded, by, key, host) for by in ("key", "cookie"))
        with contextlib.ExitStack() as open_:
            for headers in (by_key, by_cookie):  # the key's two places: its own, its cookie's
                ws = open_.enter_context(bounded.client.websocket_connect("/", headers=headers))
                ws.send_text("hi")
                assert ws.receive_text() == "hi"
            refused(bounded, by_key)
            refused(bounded, by_cookie)
            api = bounded.client.get("/v1/computers", headers=bounded.headers(key))
            assert api.status_code == 429  # the API's places are the same
            other = bounded.client.get("/v1/computers", headers=bounded.headers())
            assert other.status_code == 200  # another key of the org has its own
        with bounded.client.websocket_connect("/", headers=by_key) as ws:  # places came back
            ws.send_text("again")
            assert ws.receive_text() == "again"
        bounded.client.delete("/v1/computers/held", headers=bounded.headers(key))


def test_a_computer_s_public_port_connections_are_bounded(bounded: Server) -> None:
    with guest_echo() as port:
        publish(bounded, bounded.key, "open", port, public=True)
        publish(bounded, bounded.key, "other", port, public=True)
        host = {"host": f"{port}-open.localhost:7070"}
        with contextlib.ExitStack() as open_:
            for _ in range(2):
                ws = open_.enter_context(bounded.client.websocket_connect("/", headers=host))
                ws.send_text("hi")
                assert ws.receive_text() == "hi"
            refused(bounded, host)
            assert "public ports have 2 connections open" in get(bounded, host["host"]).text
            elsewhere = {"host": f"{port}-other.localhost:7070"}
            with bounded.client.websocket_connect("/", headers=elsewhere) as ws:
                ws.send_text("mine")  # another computer's public port has its own places
                assert ws.receive_text() == "mine"
        with bounded.client.websocket_connect("/", headers=host) as ws:  # places came back
            ws.send_text("again")
            assert ws.receive_text() == "again"
