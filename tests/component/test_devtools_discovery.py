"""A CDP client's discovery through a published port: Playwright's `connect_over_cdp(URL,
headers={"Authorization": "Bearer KEY"})` GETs `/json/version/` with the headers, follows a
redirect with them, then opens the WebSocket the answer's `webSocketDebuggerUrl` names with them
too. A hostile guest that named its own host there would be sent the caller's key: the caller
gets the URL on the port's own host, or a refusal, never the guest's choice.

The "guest" is an HTTP server on the host that answers what the test tells it (the component
tier's agent dials the host's loopback for the computer's `tcp` stream)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import http.server
import json
from collections.abc import Iterator

import pytest

from sanbox.api.ports import devtools, devtools_answer
from sanbox.api.ports.devtools_answer import Caller, Headers

from .conftest import E2bStand, Server
from .test_published_access import get, publish, serving

pytestmark = pytest.mark.component

CODE = "devtools_answer_refused"
FOREIGN = "attacker.example"
Answer = tuple[Headers, bytes]
BROWSER_ID = "5c2c29a5-83b0-4c52-a2de-7d1c6b0a4e2f"
PAGE_ID = "A1B2C3D4E5F60718293A4B5C6D7E8F90"


@contextlib.contextmanager
def devtools_guest(
    answers: dict[str, tuple[int, dict[str, str], bytes]],
    seen: list[dict[str, str]] | None = None,
) -> Iterator[int]:
    """A port that answers each path (the query left out) with the status, headers and body
    given, and a text 404 otherwise; the headers of each request it had go to `seen`."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if seen is not None:
                seen.append({k.lower(): v for k, v in self.headers.items()})
            status, headers, body = answers.get(self.path.partition("?")[0], (404, {}, b"no"))
            self.send_response(status)
            for name, value in {"content-length": str(len(body)), **headers}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    with serving(Handler) as port:
        yield port


def _json(document: object) -> tuple[int, dict[str, str], bytes]:
    return 200, {"content-type": "application/json; charset=UTF-8"}, json.dumps(document).encode()


def _version(socket_url: str) -> tuple[int, dict[str, str], bytes]:
    return _json({"Browser": "Chrome/140.0", "webSocketDebuggerUrl": socket_url})


def test_a_guest_cannot_name_another_host_for_the_client_s_websocket(server: Server) -> None:
    answers = {
        "/json/version/": _version(f"ws://{FOREIGN}/devtools/browser/{BROWSER_ID}"),
        "/json/version": _version(f"wss://{FOREIGN}:8443/x?key=1"),
        "/json/list": _json([{"id": PAGE_ID, "webSocketDebuggerUrl": f"ws://{FOREIGN}/steal"}]),
        "/json": (302, {"location": f"http://{FOREIGN}/json/version"}, b""),
        "/cdp/json/version/": (200, {"content-type": "text/plain"}, b'{"webSocketDebuggerUrl'),
        "/json/new": _json({"webSocketDebuggerUrl": None}),
    }
    with devtools_guest(answers) as port:
        publish(server, server.key, "web", port, public=False)
        host = f"{port}-web.localhost:7070"
        auth = {"authorization": f"Bearer {server.key}"}
        # a /devtools/ path is kept, on the port's own host: the client comes back here
        r = get(server, host, "/json/version/", **auth)
        assert r.status_code == 200, r.text
        assert r.json() == {
            "Browser": "Chrome/140.0",
            "webSocketDebuggerUrl": f"ws://{host}/devtools/browser/{BROWSER_ID}",
        }
        # anything else is refused: another path, a redirect, no JSON, no URL
        for path in ("/json/version", "/json/list", "/json", "/cdp/json/version/", "/json/new"):
            r = get(server, host, path, **auth)
            assert r.status_code == 502, (path, r.text)
            assert r.json()["error"]["code"] == CODE
            assert FOREIGN not in r.text and "location" not in r.headers
        # the same over https (a trusted proxy's or the server's TLS): wss, on the same host
        r = server.client.get(
            f"https://{host}/json/version/", headers={"host": host, **auth}, follow_redirects=False
        )
        assert r.json()["webSocketDebuggerUrl"] == f"wss://{host}/devtools/browser/{BROWSER_ID}"


def test_chromium_s_answers_come_through_on_the_port_s_host(server: Server) -> None:
    """What the browser type's front answers (its URLs on the published host already), and what
    Chromium itself would (on its own address), both reach the client on the port's host, a
    frontend URL that cannot be left out; the rest of the port is relayed as it was."""
    page = {
        "description": "",
        "devtoolsFrontendUrl": "/devtools/inspector.html"
        f"?ws=127.0.0.1:9222/devtools/page/{PAGE_ID}",
        "devtoolsFrontendUrlCompat": "https://chrome-devtools-frontend.appspot.com/serve_rev/"
        f"@abc/inspector.html?ws=127.0.0.1:9222/devtools/page/{PAGE_ID}",
        "id": PAGE_ID,
        "title": "Päge ✓",
        "type": "page",
        "url": "about:blank",
        "webSocketDebuggerUrl": f"ws://127.0.0.1:9222/devtools/page/{PAGE_ID}",
    }
    answers = {
        "/json/list": _json([page, {"id": "worker", "type": "service_worker"}]),
        "/json/protocol": (200, {"content-type": "text/plain"}, b"not checked: no URL in it"),
        "/other": (200, {"content-type": "text/plain"}, b"plain"),
    }
    with devtools_guest(answers) as port:
        host = f"{port}-web.localhost:7070"
        answers["/json/version/"] = _version(f"ws://{host}/devtools/browser/{BROWSER_ID}")
        publish(server, server.key, "web", port, public=False)
        auth = {"authorization": f"Bearer {server.key}"}
        r = get(server, host, "/json/version/", **auth)
        assert r.status_code == 200, r.text
        assert r.json()["webSocketDebuggerUrl"] == f"ws://{host}/devtools/browser/{BROWSER_ID}"
        r = get(server, host, "/json/list", **auth)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/json; charset=UTF-8"  # the guest's
        first, second = r.json()
        assert first == {
            **{k: v for k, v in page.items() if k != "devtoolsFrontendUrlCompat"},
            "devtoolsFrontendUrl": f"http://{host}/devtools/inspector.html"
            f"?ws={host}/devtools/page/{PAGE_ID}",
            "webSocketDebuggerUrl": f"ws://{host}/devtools/page/{PAGE_ID}",
        }
        assert second == {"id": "worker", "type": "service_worker"}
        assert get(server, host, "/json/protocol", **auth).text == "not checked: no URL in it"
        assert get(server, host, "/other", **auth).text == "plain"
        r = get(server, host, "/json/new", **auth)  # no object a client could take: as it was
        assert (r.status_code, r.text) == (404, "no")


def test_an_e2b_port_s_discovery_is_checked_too(e2b: E2bStand) -> None:
    made = e2b.client.post(
        "/e2b/sandboxes",
        headers=e2b.api,
        json={"templateID": "base", "network": {"allowPublicTraffic": False}},
    )
    assert made.status_code == 201, made.text
    sandbox, token = made.json()["sandboxID"], made.json()["trafficAccessToken"]
    answers = {"/json/version": _version(f"ws://{FOREIGN}/devtools/browser/{BROWSER_ID}")}
    with devtools_guest(answers) as port:
        host = f"{port}-{sandbox}.localhost"
        headers = {"host": host, "e2b-traffic-access-token": token}
        r = e2b.client.get("/json/version", headers=headers)
        assert r.status_code == 200, r.text
        assert r.json()["webSocketDebuggerUrl"] == f"ws://{host}/devtools/browser/{BROWSER_ID}"


def test_an_app_s_own_answers_at_such_paths_go_on_as_they_were(server: Server) -> None:
    """A path ending in `/json` is often an app's own: what no client could take a WebSocket
    URL from goes on unchanged, JSON goes on checked (its content type kept); what the host
    cannot read, or that starts as JSON but is not, is refused."""
    foreign = _version(f"ws://{FOREIGN}/devtools/browser/{BROWSER_ID}")[2]
    answers = {
        "/api/json": (404, {"content-type": "text/html"}, b"<html>no such item</html>"),
        "/part/json": (
            206,
            {"content-type": "text/plain", "content-range": "bytes 0-4/9"},
            b"hello",
        ),
        "/json/list": (304, {"etag": '"1"'}, b""),
        "/items/json": (200, {"content-type": "application/vnd.api+json"}, b'{"data": [1, 2]}'),
        "/bom/json/version": (200, {"content-type": "text/plain"}, b"\xef\xbb\xbf" + foreign),
        "/feed/json": (200, {"content-type": "application/x-ndjson"}, b'{"a": 1}\n{"b": 2}\n'),
        "/huge/json": (200, {"content-type": "application/json"}, b'{"n": 1e400}'),
        "/gz/json": (200, {"content-encoding": "gzip"}, gzip.compress(b"hello")),
        "/moved/json": (301, {"location": "/elsewhere"}, b""),
    }
    seen: list[dict[str, str]] = []
    with devtools_guest(answers, seen) as port:
        publish(server, server.key, "web", port, public=False)
        host = f"{port}-web.localhost:7070"
        auth = {"authorization": f"Bearer {server.key}"}
        asked = {**auth, "accept-encoding": "gzip", "range": "bytes=0-4"}
        r = get(server, host, "/api/json", **asked)
        assert (r.status_code, r.headers["content-type"], r.text) == (
            404,
            "text/html",
            "<html>no such item</html>",
        )
        # the guest is asked for its answer plain and whole: one the host can check
        assert "accept-encoding" not in seen[-1] and "range" not in seen[-1]
        r = get(server, host, "/part/json", **auth)
        assert (r.status_code, r.headers["content-range"], r.text) == (206, "bytes 0-4/9", "hello")
        r = get(server, host, "/json/list", **auth)
        assert (r.status_code, r.headers["etag"]) == (304, '"1"')
        r = get(server, host, "/items/json", **auth)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/vnd.api+json"
        assert r.json() == {"data": [1, 2]}
        r = get(server, host, "/bom/json/version", **auth)  # fetch().json() would read it
        assert r.json()["webSocketDebuggerUrl"] == f"ws://{host}/devtools/browser/{BROWSER_ID}"
        for path in ("/feed/json", "/huge/json", "/gz/json", "/moved/json"):
            r = get(server, host, path, **auth)
            assert (r.status_code, r.json()["error"]["code"]) == (502, CODE), path


def test_what_an_answer_costs_the_server_is_bounded(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A guest can be called through its own public port, many times at once: one answer is
    held up to 256 KiB and 10,000 objects and arrays, all answers held at once up to the
    process's budget (past it 503, not a wait), and checked in a worker thread, not on the
    event loop that serves every tenant."""
    many = b"[" + b"{}," * 10_000 + b"{}]"
    large = json.dumps({"title": "a" * 256 * 1024}).encode()
    small = _version(f"ws://{FOREIGN}/devtools/browser/{BROWSER_ID}")
    answers = {
        "/many/json": (200, {"content-type": "application/json"}, many),
        "/large/json": (200, {"content-type": "application/json"}, large),
        "/json/version": small,
    }
    checked_on: list[bool] = []

    def checked_answer(status: int, head: Headers, body: bytes, caller: Caller) -> Answer:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            checked_on.append(False)  # no event loop in this thread
        else:
            checked_on.append(True)
        return devtools_answer.checked_answer(status, head, body, caller)

    with devtools_guest(answers) as port:
        publish(server, server.key, "web", port, public=False)
        host = f"{port}-web.localhost:7070"
        auth = {"authorization": f"Bearer {server.key}"}
        for path in ("/many/json", "/large/json"):
            r = get(server, host, path, **auth)
            assert r.status_code == 502, (path, r.text[:80])
            assert r.json()["error"]["code"] == CODE
        assert "larger than 256 KiB" in r.json()["error"]["message"]
        monkeypatch.setattr(devtools, "checked_answer", checked_answer)
        monkeypatch.setattr(devtools, "HELD", devtools.HeldBytes(len(small[2]) - 1))
        r = get(server, host, "/json/version", **auth)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "devtools_answers_busy"
        assert "try again" in r.json()["error"]["message"]
        assert devtools.HELD.held == 0 and checked_on == []
        monkeypatch.setattr(devtools, "HELD", devtools.HeldBytes(len(small[2])))
        r = get(server, host, "/json/version", **auth)
        assert r.status_code == 200, r.text
        assert devtools.HELD.held == 0 and checked_on == [False]


def test_one_computer_s_held_answers_leave_the_others_their_share(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bytes held for one computer's answers (slow or large ones through its public port,
    which anyone may call) are bounded below the process's budget: that computer is told 503,
    another computer's discovery is still answered."""
    small = _version(f"ws://{FOREIGN}/devtools/browser/{BROWSER_ID}")
    held = devtools.HeldBytes(4 * len(small[2]), each=len(small[2]))
    monkeypatch.setattr(devtools, "HELD", held)
    with devtools_guest({"/json/version": small}) as port:
        publish(server, server.key, "cdp-a", port, public=False)
        publish(server, server.key, "cdp-b", port, public=False)
        auth = {"authorization": f"Bearer {server.key}"}
        ids = {
            name: server.client.get(f"/v1/computers/{name}", headers=server.headers()).json()["id"]
            for name in ("cdp-a", "cdp-b")
        }
        assert held.take(1, ids["cdp-a"])  # one of cdp-a's answers is being held
        r = get(server, f"{port}-cdp-a.localhost:7070", "/json/version", **auth)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "devtools_answers_busy"
        r = get(server, f"{port}-cdp-b.localhost:7070", "/json/version", **auth)
        assert r.status_code == 200, r.text
        held.give(1, ids["cdp-a"])
        assert held.held == 0 and held.of(ids["cdp-a"]) == 0 and held.of(ids["cdp-b"]) == 0
        r = get(server, f"{port}-cdp-a.localhost:7070", "/json/version", **auth)
        assert r.status_code == 200, r.text


def test_held_bytes_are_bounded_per_holder_and_in_all() -> None:
    held = devtools.HeldBytes(10, each=6)
    assert held.take(6, "a") and not held.take(1, "a")
    assert held.take(4, "b") and not held.take(1, "c")  # the process's 10 are all held
    held.give(6, "a")
    assert held.take(5, "c") and held.of("a") == 0 and held.held == 9
