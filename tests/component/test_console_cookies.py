"""Cookie tossing over plain HTTP: a published port's page (a sibling subdomain) can set a
`sanbox_console` cookie for the parent domain holding a session of its own org, and the browser
then sends both. The console acted as whichever came last (the other site's: a secret typed
landed in its org); a request carrying two is now logged out, on every path that reads the
session, and the login page says what happened and what to do."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from starlette.websockets import WebSocketDisconnect

from .conftest import Server

pytestmark = pytest.mark.component

ORIGIN = {"origin": "http://testserver"}
TWO_SESSIONS = "two console sessions"


def _session(server: Server, key: str) -> str:
    """A console session of `key`: its cookie token (the client's jar left empty)."""
    r = server.client.post(
        "/console/login", data={"key": key}, headers=ORIGIN, follow_redirects=False
    )
    assert r.status_code == 303, r.text
    token = r.cookies["sanbox_console"]
    server.client.cookies.clear()
    return str(token)


def _cookie(*tokens: str) -> dict[str, str]:
    return {"cookie": "; ".join(f"sanbox_console={t}" for t in tokens)}


def _csrf(page: str) -> str:
    found = re.search(r'<meta name="csrf-token" content="([^"]+)">', page)
    assert found, page
    return found.group(1)


@dataclass
class Tossed:
    server: Server
    victim: str  # the browser's own session (org default)
    attacker: str  # the other site's session (org other)
    attacker_csrf: str  # what a page loaded with both cookies held
    other_key: str  # a key of org other

    def both(self) -> dict[str, str]:
        """The browser's cookies once the other site set its own: its comes last."""
        return _cookie(self.victim, self.attacker)


@pytest.fixture
def tossed(server: Server) -> Tossed:
    admin = server.headers()
    server.client.post("/v1/orgs", json={"name": "other"}, headers=admin).raise_for_status()
    made = server.client.post("/v1/keys", json={"org": "other"}, headers=admin)
    made.raise_for_status()
    other_key = made.json()["key"]
    victim, attacker = _session(server, server.key), _session(server, other_key)
    page = server.client.get("/console/secrets", headers=_cookie(attacker))
    assert page.status_code == 200 and ">other</b>" in page.text
    return Tossed(server, victim, attacker, _csrf(page.text), other_key)


def test_two_session_cookies_are_logged_out_not_the_last_ones_org(tossed: Tossed) -> None:
    client, both = tossed.server.client, tossed.both()
    alone = client.get("/console/computers", headers=_cookie(tossed.victim))
    assert alone.status_code == 200 and ">default</b>" in alone.text
    page = client.get(
        "/console/computers", headers={**both, "accept": "text/html"}, follow_redirects=False
    )
    assert page.status_code == 303, page.text  # it showed org other
    assert page.headers["location"] == "/console/login?why=ambiguous"
    login = client.get(page.headers["location"])
    assert TWO_SESSIONS in login.text and "clear this site" in login.text
    assert "HTTPS" in login.text
    fragment = client.get("/console/computers", headers={**both, "hx-request": "true"})
    assert fragment.status_code == 204
    assert fragment.headers["hx-redirect"] == "/console/login?why=ambiguous"
    for path in (  # a script's call, the live rows, a download
        "/console/secrets",
        "/console/computers/stream",
        "/console/computers/x/files/download?path=/etc/hostname",
    ):
        r = client.get(path, headers=both)
        assert r.status_code == 401, (path, r.text)
        assert TWO_SESSIONS in r.json()["error"]["message"]
        assert r.headers["x-login"] == "/console/login?why=ambiguous"


def test_a_write_with_two_session_cookies_lands_in_no_org(tossed: Tossed) -> None:
    server, client = tossed.server, tossed.server.client
    write = {**tossed.both(), **ORIGIN, "x-csrf-token": tossed.attacker_csrf, "hx-request": "true"}
    put = client.post(
        "/console/secrets",
        data={"name": "typed", "value": "v" * 12, "hosts": "api.example.com"},
        headers=write,
    )
    for key in (server.key, tossed.other_key):
        names = client.get("/v1/secrets", headers=server.headers(key)).json()["secrets"]
        assert names == [], "the secret landed in an org"
    assert put.status_code == 204
    assert put.headers["hx-redirect"] == "/console/login?why=ambiguous"
    out = client.post("/console/logout", headers=write)
    assert out.headers["hx-redirect"] == "/console/login?why=ambiguous"
    for token in (tossed.victim, tossed.attacker):  # logout closed neither: it could not tell whose
        assert client.get("/console/computers", headers=_cookie(token)).status_code == 200


@pytest.mark.parametrize("path", ["terminal", "screen/watch", "screen/control"])
def test_a_socket_with_two_session_cookies_is_told_why(tossed: Tossed, path: str) -> None:
    url, headers = f"/console/computers/x/{path}", {**ORIGIN, **tossed.both()}
    with tossed.server.client.websocket_connect(url, headers=headers) as ws:
        ws.send_json({"type": "start", "cmd": ["true"]})  # a terminal let in would wait for it
        said = ws.receive_json()
        assert said["code"] == "unauthorized" and TWO_SESSIONS in said["message"], said
        with pytest.raises(WebSocketDisconnect):
            ws.receive_json()
