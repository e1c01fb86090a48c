"""What a port's URL does with `?token=`: a Sanbox key in it never reaches the guest's page (it
would sit in the page's address bar, for its scripts and its Referer), private port or public."""

from __future__ import annotations

import pytest

from .conftest import Server
from .test_published_access import get, guest_page, make_org, publish

pytestmark = pytest.mark.component


def test_a_key_in_a_public_port_s_url_is_dropped_before_the_page_loads(server: Server) -> None:
    acme = make_org(server, "acme")
    with guest_page() as (port, seen):
        publish(server, server.key, "open", port, public=True)
        host = f"{port}-open.localhost:7070"
        for key in (server.key, acme):  # the port's org's key, and anyone else's
            r = get(server, host, f"/b?x=1&token={key}")
            assert r.status_code == 200, r.text
            assert 'content="0;url=/b?x=1"' in r.text
            assert r.headers["referrer-policy"] == "no-referrer"
            assert "set-cookie" not in r.headers  # a public port needs none
            assert seen.requests == [], "the guest was sent a request with the key in its URL"
        r = get(server, host, "/b?x=1")  # where the browser goes next: the page, without it
        assert r.status_code == 200 and r.text == "guest page\n"
        assert [path for path, _ in seen.requests] == ["/b?x=1"]
        assert server.key not in seen.everything()


def test_the_page_that_drops_the_key_stays_on_the_port_s_origin(server: Server) -> None:
    """A port URL whose path begins `//evil.example` was sent to evil.example by the page that
    drops `?token=` (a scheme-relative URL): an open redirect on every port's host."""
    with guest_page() as (port, _seen):
        publish(server, server.key, "home", port, public=False)
        host = f"{port}-home.localhost:7070"
        url = f"http://{host}//evil.example/x?token={server.key}"
        r = server.client.get(url, headers={"host": host}, follow_redirects=False)
        assert r.status_code == 200, r.text
        assert 'content="0;url=/evil.example/x"' in r.text


def test_a_token_that_is_no_sanbox_key_is_the_guest_s(server: Server) -> None:
    """Jupyter's `?token=abc` is its own login: it reaches the guest as it was sent, private port
    or public, and is neither refused nor counted as a failed login of the visitor's address."""
    with guest_page() as (port, seen):
        publish(server, server.key, "lab", port, public=True)
        host = f"{port}-lab.localhost:7070"
        for _ in range(25):  # past the failures an address may have (20 a minute)
            r = get(server, host, "/lab?token=abc123")
            assert r.status_code == 200 and r.text == "guest page\n", r.text
        assert {path for path, _ in seen.requests} == {"/lab?token=abc123"}
        assert server.client.get("/v1/computers", headers=server.headers()).status_code == 200
        set_private = {"port": port, "public": False}
        server.client.post("/v1/computers/lab/ports", json=set_private, headers=server.headers())
        r = get(server, host, "/lab?token=abc123", authorization=f"Bearer {server.key}")
        assert r.status_code == 200 and seen.requests[-1][0] == "/lab?token=abc123"
        r = get(server, host, "/lab?token=abc123")  # no key: the keyless answer, not 401
        assert (r.status_code, r.json()["error"]["code"]) == (404, "port_not_found")
