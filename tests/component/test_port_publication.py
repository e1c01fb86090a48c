"""Unpublishing a port, or making it private, ends the access it had granted: a port cookie is
bound to the publication it was minted for (publishing again is another one, which no cookie of
the first opens), and a connection left open (a VNC WebSocket, an event stream) is checked again
against the port's current publication, ending once the port is unpublished, published again, or
made private under a visitor who came in because it was public."""

from __future__ import annotations

import contextlib
import threading

import pytest

from sanbox.api import standing

from .conftest import Server
from .test_published_access import (
    Seen,
    get,
    guest,
    guest_echo,
    guest_stream,
    in_background,
    opened_by,
    publish,
)
from .test_view_link import host_and_path, keyless, shape, trade, view_link

pytestmark = pytest.mark.component
__all__ = ["guest"]  # the fixture, used by name


def republish(server: Server, name: str, port: int, public: bool) -> None:
    h = server.headers()
    assert server.client.delete(f"/v1/computers/{name}/ports/{port}", headers=h).status_code == 204
    r = server.client.post(
        f"/v1/computers/{name}/ports", json={"port": port, "public": public}, headers=h
    )
    assert r.status_code == 201, r.text


def set_public(server: Server, name: str, port: int, public: bool) -> None:
    r = server.client.post(
        f"/v1/computers/{name}/ports",
        json={"port": port, "public": public},
        headers=server.headers(),
    )
    assert r.status_code == 201, r.text


def test_a_cookie_does_not_open_the_port_published_again(
    server: Server, guest: tuple[int, Seen]
) -> None:
    port, seen = guest
    publish(server, server.key, "again", port, public=False)
    host, path = host_and_path(view_link(server, "again", port))
    _, viewing = trade(server, host, path)  # a view link's view-only cookie
    full = opened_by(server, "cookie", server.key, host)  # a key's full one
    view_cookie = {"cookie": viewing.split(";")[0]}
    assert get(server, host, "/before", **view_cookie).status_code == 200
    assert get(server, host, "/before", cookie=full["cookie"]).status_code == 200
    republish(server, "again", port, public=False)
    assert shape(get(server, host, "/after", **view_cookie)) == keyless(server, host)
    assert shape(get(server, host, "/after", cookie=full["cookie"])) == keyless(server, host)
    assert [p for p, _ in seen.requests] == ["/before", "/before"]


def ends(ws: object) -> threading.Event:
    """Set once the WebSocket `ws` (the test client's) has ended."""
    ended = threading.Event()

    def wait_end() -> None:
        with contextlib.suppress(Exception):
            while True:
                ws.receive_text()  # type: ignore[attr-defined]
        ended.set()

    threading.Thread(target=wait_end, daemon=True).start()
    return ended


@pytest.mark.parametrize("change", ["private", "unpublished"])
def test_an_anonymous_websocket_ends_when_its_port_stops_being_public(
    server: Server, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """A VNC session opened by anyone while the port was public went on for as long as it was
    left open, after the port was made private or unpublished."""
    monkeypatch.setattr(standing, "RECHECK", 0.1)
    with guest_echo() as port:
        publish(server, server.key, "shown", port, public=True)
        host = {"host": f"{port}-shown.localhost:7070"}
        with server.client.websocket_connect("/", headers=host) as ws:
            ws.send_text("hello")
            assert ws.receive_text() == "hello"
            ended = ends(ws)
            assert not ended.wait(0.5), "the WebSocket should still be open"
            if change == "private":
                set_public(server, "shown", port, False)
            else:
                r = server.client.delete(
                    f"/v1/computers/shown/ports/{port}", headers=server.headers()
                )
                assert r.status_code == 204
            assert ended.wait(10), "the WebSocket outlived its port's publication"


@pytest.mark.parametrize("by", ["key", "cookie"])
def test_a_key_s_websocket_ends_when_its_port_is_published_again(
    server: Server, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    monkeypatch.setattr(standing, "RECHECK", 0.1)
    with guest_echo() as port:
        publish(server, server.key, "keyed", port, public=False)
        host = f"{port}-keyed.localhost:7070"
        headers = opened_by(server, by, server.key, host)
        with server.client.websocket_connect("/", headers=headers) as ws:
            ws.send_text("hello")
            assert ws.receive_text() == "hello"
            ended = ends(ws)
            set_public(server, "keyed", port, True)  # the key opens it public too: it goes on
            assert not ended.wait(0.5), "made public, the key's WebSocket should go on"
            republish(server, "keyed", port, public=False)
            assert ended.wait(10), "the WebSocket outlived its port's publication"


def test_an_anonymous_stream_ends_when_its_port_is_made_private(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(standing, "RECHECK", 0.1)
    with guest_stream(0) as (port, reached):
        publish(server, server.key, "streamed", port, public=True)
        host = {"host": f"{port}-streamed.localhost:7070"}
        ended, answers = in_background(lambda: server.client.get("/events", headers=host))
        assert reached.wait(10)
        assert not ended.wait(0.5), "the stream should still be going"
        set_public(server, "streamed", port, False)
        assert ended.wait(10), "the stream outlived its port being public"
        answer = answers[0]
        if not isinstance(answer, Exception):  # ended short of the guest's 600 lines
            assert answer.content.count(b"tick") < 600  # type: ignore[attr-defined]
