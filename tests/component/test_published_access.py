"""Published ports as an attacker sees them: a URL names one computer of one org whatever other
orgs call theirs, and nothing of the caller's credentials reaches the server inside the computer.

The "guest" here is an HTTP server on the host that records every request it receives (the
component tier's agent dials the host's loopback for the computer's `tcp` stream)."""

from __future__ import annotations

import contextlib
import http.server
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

from sanbox.api import standing
from sanbox.api.redact import RedactCredentials, redact

from .conftest import Server

if TYPE_CHECKING:
    import httpx2  # what starlette's TestClient answers with

pytestmark = pytest.mark.component


@dataclass
class Seen:
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def everything(self) -> str:
        return repr(self.requests)


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """`handler` served on a local port (the stand-in's guest is a local process): the port."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True  # a stream still going ends with the test
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextlib.contextmanager
def guest_page(cookies: tuple[str, ...] = ()) -> Iterator[tuple[int, Seen]]:
    """A page on a local port (the stand-in's guest is a local process), and what it was sent;
    it answers with `cookies` set."""
    seen = Seen()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            seen.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            body = b"guest page\n"
            self.send_response(200)
            for cookie in cookies:
                self.send_header("set-cookie", cookie)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    with serving(Handler) as port:
        yield port, seen


@pytest.fixture
def guest() -> Iterator[tuple[int, Seen]]:
    with guest_page() as page:
        yield page


def make_org(server: Server, name: str) -> str:
    r = server.client.post("/v1/orgs", json={"name": name}, headers=server.headers())
    assert r.status_code == 201, r.text
    r = server.client.post("/v1/keys", json={"org": name, "name": "t"}, headers=server.headers())
    assert r.status_code == 201, r.text
    key: str = r.json()["key"]
    return key


def publish(server: Server, key: str, name: str, port: int, public: bool) -> str:
    h = server.headers(key)
    r = server.client.post("/v1/computers", json={"name": name}, headers=h)
    assert r.status_code == 201, r.text
    r = server.client.post(
        f"/v1/computers/{name}/ports", json={"port": port, "public": public}, headers=h
    )
    assert r.status_code == 201, r.text
    url: str = r.json()["url"]
    return url


def get(server: Server, host: str, path: str = "/", **headers: str) -> httpx2.Response:
    return server.client.get(path, headers={"host": host, **headers}, follow_redirects=False)


def test_same_name_in_two_orgs_each_url_reaches_its_own(
    server: Server, guest: tuple[int, Seen]
) -> None:
    port, _seen = guest
    acme = make_org(server, "acme")
    # the default org publishes publicly; acme's computer of the same name privately
    assert publish(server, server.key, "ho-port", port, public=True) == (
        f"http://{port}-ho-port.localhost:7070/"
    )
    assert publish(server, acme, "ho-port", port, public=False) == (
        f"http://{port}-ho-port.acme.localhost:7070/"
    )
    # a keyless visitor to acme's URL is not served by the default org's public port (and is
    # told nothing that tells a private port from none)
    r = get(server, f"{port}-ho-port.acme.localhost:7070")
    assert r.status_code == 404 and r.json()["error"]["code"] == "port_not_found"
    assert get(server, f"{port}-ho-port.localhost:7070").status_code == 200
    # acme's key opens acme's URL; the default org's key does not
    auth = {"authorization": f"Bearer {acme}"}
    assert get(server, f"{port}-ho-port.acme.localhost", **auth).status_code == 200
    r = get(server, f"{port}-ho-port.acme.localhost", authorization=f"Bearer {server.key}")
    assert r.status_code == 404
    # an org cannot take over the short URL by choosing the same name and port
    other = make_org(server, "other")
    publish(server, other, "ho-port", port, public=True)
    r = get(server, f"{port}-ho-port.acme.localhost")
    assert r.status_code == 404
    # a name another org does not have is not found there, whatever the default org has
    r = get(server, f"{port}-nothing.acme.localhost")
    assert r.json()["error"]["code"] == "port_not_found"


def test_no_key_token_or_cookie_of_sanbox_reaches_the_guest(
    server: Server, guest: tuple[int, Seen]
) -> None:
    port, seen = guest
    publish(server, server.key, "private", port, public=False)
    host = f"{port}-private.localhost:7070"
    # a bearer key: relayed without it; the guest's own cookies and auth pass
    r = get(server, host, "/a", authorization=f"Bearer {server.key}", cookie="theirs=1")
    assert r.status_code == 200
    # a browser with ?token=: a page that moves to the URL without it, holding the port cookie
    r = get(server, host, f"/b?x=1&token={server.key}")
    assert r.status_code == 200
    assert 'content="0;url=/b?x=1"' in r.text
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and server.key not in cookie
    value = cookie.split(";")[0]
    server.client.cookies.clear()
    r = get(server, host, "/b?x=1", cookie=f"theirs=2; {value}")
    assert r.status_code == 200
    # a WebSocket-style token on a non-GET or a token on a public port is still stripped
    assert [path for path, _ in seen.requests] == ["/a", "/b?x=1"]
    assert server.key not in seen.everything() and "token" not in seen.everything()
    assert "sanbox_port" not in seen.everything()
    assert seen.requests[0][1].get("cookie") == "theirs=1"
    assert seen.requests[1][1].get("cookie") == "theirs=2"
    assert "authorization" not in seen.requests[0][1]
    # the cookie is for this computer and port only: forged or moved, it opens nothing
    forged = value[:-2] + ("11" if value.endswith("00") else "00")  # never the cookie itself
    r = get(server, host, "/c", cookie=forged)
    assert r.status_code == 404
    # another key scheme is the guest's own business and passes untouched
    r = get(server, host, "/d", authorization="Basic dXNlcjpwdw==")
    assert r.status_code == 404


def _cookie(server: Server, host: str, view: bool = False) -> str:
    query = f"token={server.key}" + ("&sanbox_view=1" if view else "")
    r = get(server, host, f"/?{query}")
    assert r.status_code == 200, r.text
    server.client.cookies.clear()
    value: str = r.headers["set-cookie"].split(";")[0]
    return value


def test_a_guest_sets_cookies_on_its_own_port_only(server: Server) -> None:
    """Every port's host shares a parent domain: a guest's cookie for the whole of it (its
    `Domain`) would reach every other org's ports, and one named as the port's own would shadow
    their visitors' port cookies. A page's script can still set one, so every port cookie a
    request carries is tried."""
    planted = (
        "sanbox_port=junk; Domain=localhost; Path=/",
        "session=fixed; Domain=.localhost; Path=/; HttpOnly",
        "plain=1",
    )
    with guest_page(planted) as (port, _seen):
        publish(server, server.key, "tosser", port, public=True)
        r = get(server, f"{port}-tosser.localhost:7070")
        assert r.status_code == 200
        assert r.headers.get_list("set-cookie") == [
            "session=fixed; Path=/; HttpOnly",
            "plain=1",
        ]
    server.client.cookies.clear()
    with guest_page() as (port, _seen):
        publish(server, server.key, "victim", port, public=False)
        host = f"{port}-victim.localhost:7070"
        value = _cookie(server, host)
        r = get(server, host, "/", cookie=f"sanbox_port=junk; {value}")
        assert r.status_code == 200


def test_a_keyless_visitor_cannot_tell_a_private_port_from_none(
    server: Server, guest: tuple[int, Seen]
) -> None:
    port, _ = guest
    acme = make_org(server, "acme")
    publish(server, acme, "priv", port, public=False)
    server.client.post(
        "/v1/computers/priv/ports",
        json={"port": port + 1, "public": False},
        headers=server.headers(acme),
    )
    hosts = {
        "private": f"{port}-priv.acme.localhost:7070",
        "not published": f"{port + 2}-priv.acme.localhost:7070",
        "no computer": f"{port}-nope.acme.localhost:7070",
    }
    answers = {}
    for what, host in hosts.items():
        for extra in ({}, {"authorization": f"Bearer {server.key}"}, {"cookie": "sanbox_port=x"}):
            r = get(server, host, **extra)
            body = r.json()
            shape = (r.status_code, body["error"]["code"], tuple(sorted(r.headers.keys())))
            answers[(what, tuple(extra))] = shape
            assert "private" not in body["error"]["message"].split(":")[0], what
    assert len(set(answers.values())) == 1, answers
    assert next(iter(answers.values()))[:2] == (404, "port_not_found")
    # a key of the URL's org gets the precise answer, and a wrong key 401 whatever the URL
    r = get(server, hosts["no computer"], authorization=f"Bearer {acme}")
    assert "no published port" in r.json()["error"]["message"]
    for host in hosts.values():
        r = get(server, host, authorization="Bearer sbk_wrong")
        assert r.status_code == 401


def test_a_cookie_request_must_come_from_the_port_s_own_page(
    server: Server, guest: tuple[int, Seen]
) -> None:
    port, seen = guest
    publish(server, server.key, "mine", port, public=False)
    host = f"{port}-mine.localhost:7070"
    cookie = _cookie(server, host)
    foreign = [
        f"http://{port + 1}-mine.localhost:7070",  # another port of the same computer
        f"http://{port}-mine.acme.localhost:7070",  # another org's
        f"http://{port}-mine.localhost:7071",  # another server port
        f"https://{port}-mine.localhost:7070",  # another scheme
        "null",
    ]
    for origin in foreign:
        r = server.client.post("/x", headers={"host": host, "cookie": cookie, "origin": origin})
        assert (r.status_code, r.json()["error"]["code"]) == (403, "cross_origin"), origin
    assert [p for p, _ in seen.requests] == []
    mine = {"host": host, "cookie": cookie, "origin": f"http://{host}"}
    assert server.client.post("/x", headers=mine).status_code == 501  # the guest's: it got there
    r = get(server, host, "/y", cookie=cookie, origin="http://evil.example")  # a script's GET
    assert (r.status_code, r.json()["error"]["code"]) == (403, "cross_origin")
    navigation = {"sec-fetch-site": "same-site", "sec-fetch-mode": "navigate"}
    r = get(server, host, "/y", cookie=cookie, **navigation, **{"sec-fetch-dest": "document"})
    assert r.status_code == 200  # a link followed from another port's page: a page load
    r = get(server, host, "/z", cookie=cookie, **navigation, **{"sec-fetch-dest": "iframe"})
    assert (r.status_code, r.json()["error"]["code"]) == (403, "cross_origin")  # framed
    # a key instead of the cookie is no browser's doing: no Origin needed
    r = server.client.post(
        "/x",
        headers={
            "host": host,
            "authorization": f"Bearer {server.key}",
            "origin": "http://evil.example",
        },
    )
    assert r.status_code == 501


def test_a_view_only_cookie_opens_safe_methods_only(
    server: Server, guest: tuple[int, Seen]
) -> None:
    port, seen = guest
    publish(server, server.key, "watch", port, public=False)
    host = f"{port}-watch.localhost:7070"
    r = get(server, host, f"/?token={server.key}&sanbox_view=1&x=1")
    assert 'content="0;url=/?x=1"' in r.text
    cookie = _cookie(server, host, view=True)
    assert get(server, host, "/see", cookie=cookie).status_code == 200
    r = server.client.post(
        "/x", headers={"host": host, "cookie": cookie, "origin": f"http://{host}"}
    )
    assert (r.status_code, r.json()["error"]["code"]) == (403, "view_only")
    assert [p for p, _ in seen.requests] == ["/see"]
    assert "sanbox_view" not in seen.everything()


def test_the_access_log_never_holds_a_key() -> None:
    key = "sbk_" + "A" * 43
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", f"/x?a=1&token={key}&b=2", "1.1", 303),
        None,
    )
    assert RedactCredentials().filter(record)
    line = record.getMessage()
    assert key not in line and "token=[redacted]&b=2" in line
    assert redact(f"Bearer {key}") == "Bearer sbk_[redacted]"


def in_background(call: Callable[[], object]) -> tuple[threading.Event, list[object]]:
    """`call()` run in a thread: an event set once it ended, and what it answered or raised."""
    ended, outcome = threading.Event(), []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:  # a response broken off, say
            outcome.append(exc)
        ended.set()

    threading.Thread(target=run, daemon=True).start()
    return ended, outcome


def opened_by(server: Server, by: str, key: str, host: str) -> dict[str, str]:
    """The headers of a request to a private port at `host` opened `by` the key itself, or by
    the port cookie a browser got for it (from the port's own page)."""
    if by == "key":
        return {"host": host, "authorization": f"Bearer {key}"}
    r = get(server, host, f"/?token={key}")
    value = r.headers["set-cookie"].split(";")[0]
    server.client.cookies.clear()
    return {"host": host, "cookie": value, "origin": f"http://{host}"}


@contextlib.contextmanager
def guest_echo() -> Iterator[int]:
    """A WebSocket echo on a local port (the stand-in's guest), its port."""
    from websockets.sync.server import ServerConnection, serve

    def echo(ws: ServerConnection) -> None:
        for message in ws:
            ws.send(message)

    with serve(echo, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield server.socket.getsockname()[1]
        finally:
            server.shutdown()


@pytest.mark.parametrize("by", ["key", "cookie"])
def test_a_port_websocket_ends_when_its_key_stops(
    server: Server, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    """A WebSocket to a private port (a VNC, a terminal) opened by a key, or by a cookie that
    key made, ends within a re-check of the key's revocation (it went on while left open)."""
    monkeypatch.setattr(standing, "RECHECK", 0.1)
    made = server.client.post("/v1/keys", json={"name": "ws"}, headers=server.headers())
    key, key_id = made.json()["key"], made.json()["id"]
    with guest_echo() as port:
        publish(server, key, "wsport", port, public=False)
        host = f"{port}-wsport.localhost:7070"
        headers = opened_by(server, by, key, host)
        with server.client.websocket_connect("/", headers=headers) as ws:
            ws.send_text("hello")
            assert ws.receive_text() == "hello"
            revoked = server.client.delete(f"/v1/keys/{key_id}", headers=server.headers())
            assert revoked.status_code == 200
            ended = threading.Event()

            def wait_end() -> None:
                with contextlib.suppress(Exception):
                    while True:
                        ws.receive_text()
                ended.set()

            threading.Thread(target=wait_end, daemon=True).start()
            assert ended.wait(10), "the port's WebSocket outlived its key"


@contextlib.contextmanager
def guest_stream(head_after: float) -> Iterator[tuple[int, threading.Event]]:
    """A page that answers after `head_after` s and then streams a line every 50 ms for 30 s (an
    event stream, a long download); the event is set once a request reached it."""
    reached = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802
            reached.set()
            if head_after and threading.Event().wait(head_after):
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            with contextlib.suppress(OSError):
                for _ in range(600):
                    self.wfile.write(b"6\r\ntick\r\n\r\n")
                    self.wfile.flush()
                    threading.Event().wait(0.05)
                self.wfile.write(b"0\r\n\r\n")

        def log_message(self, *_args: object) -> None:
            pass

    with serving(Handler) as port:
        yield port, reached


@pytest.mark.parametrize(("by", "head_after"), [("key", 0), ("cookie", 0), ("key", 30)])
def test_a_port_http_stream_ends_when_its_key_stops(
    server: Server, monkeypatch: pytest.MonkeyPatch, by: str, head_after: float
) -> None:
    """An HTTP exchange with a private port (an event stream, a long download, a slow answer)
    opened by a key, or by a cookie that key made, ends within a re-check of the key's
    revocation: broken off if its response had begun, else answered 401 (it went on)."""
    monkeypatch.setattr(standing, "RECHECK", 0.1)
    made = server.client.post("/v1/keys", json={"name": "sse"}, headers=server.headers())
    key, key_id = made.json()["key"], made.json()["id"]
    with guest_stream(head_after) as (port, reached):
        publish(server, key, "sseport", port, public=False)
        host = f"{port}-sseport.localhost:7070"
        headers = opened_by(server, by, key, host)
        ended, answers = in_background(lambda: server.client.get("/events", headers=headers))
        assert reached.wait(10)
        assert not ended.wait(0.5), "the exchange should still be going"
        revoked = server.client.delete(f"/v1/keys/{key_id}", headers=server.headers())
        assert revoked.status_code == 200
        assert ended.wait(10), "the port's HTTP exchange outlived its key"
        answer = answers[0]
        if head_after:
            assert answer.status_code == 401  # type: ignore[attr-defined]
            assert answer.json()["error"]["code"] == "unauthorized"  # type: ignore[attr-defined]
        elif not isinstance(answer, Exception):  # ended short of the guest's 600 lines
            assert answer.content.count(b"tick") < 600  # type: ignore[attr-defined]
