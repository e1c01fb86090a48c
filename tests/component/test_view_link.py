"""View links as an attacker sees them: a link opens its own port of its own computer view-only and
nothing else; a changed, expired or revoked one is no credential at all (the keyless visitor's
404); its token never reaches the guest. The "guest" is the recording server of
`test_published_access`."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import pytest
from typer.testing import CliRunner

from sanbox import Sanbox
from sanbox.api.ports.view_link import LinkTarget
from sanbox.api.published import view_link_signer
from sanbox.cli.main import app
from sanbox.sdk.errors import SanboxError

from .conftest import LiveServer, Server
from .test_published_access import Seen, get, guest, make_org, publish

pytestmark = pytest.mark.component
__all__ = ["guest"]  # the fixture, used by name


def view_link(server: Server, name: str, port: int, key: str | None = None, **body: int) -> str:
    r = server.client.post(
        f"/v1/computers/{name}/ports/{port}/view-link",
        json=body or None,
        headers=server.headers(key),
    )
    assert r.status_code == 200, r.text
    url: str = r.json()["url"]
    return url


def host_and_path(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.netloc, f"{parts.path}?{parts.query}"


def keyless(server: Server, host: str) -> tuple[int, str, tuple[str, ...]]:
    """The answer to a visitor without credentials, as its shape."""
    return shape(get(server, host))


def shape(r: object) -> tuple[int, str, tuple[str, ...]]:
    return (
        r.status_code,  # type: ignore[attr-defined]
        r.json()["error"]["code"],  # type: ignore[attr-defined]
        tuple(sorted(r.headers.keys())),  # type: ignore[attr-defined]
    )


def trade(server: Server, host: str, path: str) -> tuple[str, str]:
    """Follow a view link: the page it answers and the cookie it sets."""
    r = get(server, host, path)
    assert r.status_code == 200, r.text
    server.client.cookies.clear()
    cookie: str = r.headers["set-cookie"]
    return r.text, cookie


def test_a_view_link_opens_its_port_view_only(server: Server, guest: tuple[int, Seen]) -> None:
    port, seen = guest
    publish(server, server.key, "watch", port, public=False)
    before = time.time()
    r = server.client.post(
        f"/v1/computers/watch/ports/{port}/view-link", headers=server.headers()
    )  # no body: the default hour
    assert r.status_code == 200, r.text
    url = r.json()["url"]
    assert url.startswith(f"http://{port}-watch.localhost:7070/?sanbox_view_token=")
    assert server.key not in url and "sbk_" not in url
    expires_at = r.json()["expires_at"]
    host, path = host_and_path(url)
    page, cookie = trade(server, host, path + "&x=1")
    assert 'content="0;url=/?x=1"' in page
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and ".view." in cookie
    max_age = int(cookie.split("Max-Age=")[1].split(";")[0])
    assert (
        3590 <= max_age <= 3600
        and abs(
            time.mktime(time.strptime(expires_at[:19], "%Y-%m-%dT%H:%M:%S"))
            - time.timezone
            - (before + 3600)
        )
        < 10
    )
    value = cookie.split(";")[0]
    assert get(server, host, "/see?x=1", cookie=value).status_code == 200
    r = server.client.post(
        "/x", headers={"host": host, "cookie": value, "origin": f"http://{host}"}
    )
    assert (r.status_code, r.json()["error"]["code"]) == (403, "view_only")
    # the link itself is no key: a POST with it is a keyless visitor's
    r = server.client.post(path, headers={"host": host, "origin": f"http://{host}"})
    assert shape(r) == keyless(server, host)
    # nothing of the link reached the guest: only the page load with the cookie did
    token = parse_qs(urlsplit(url).query)["sanbox_view_token"][0]
    assert [p for p, _ in seen.requests] == ["/see?x=1"]
    assert token not in seen.everything() and "sanbox_view" not in seen.everything()
    assert "sanbox_port" not in seen.everything()


def test_a_view_link_lasts_as_asked_and_its_cookie_no_longer(
    server: Server, guest: tuple[int, Seen]
) -> None:
    port, _ = guest
    publish(server, server.key, "short", port, public=False)
    host, path = host_and_path(view_link(server, "short", port, expires_in=60))
    _, cookie = trade(server, host, path)
    assert 50 <= int(cookie.split("Max-Age=")[1].split(";")[0]) <= 60
    expires = int(cookie.split("=", 1)[1].split(".")[1])
    assert expires <= time.time() + 60
    h = server.headers()
    for bad in ({"expires_in": 59}, {"expires_in": 7 * 86400 + 1}, {"expires_in": "x"}, {"y": 1}):
        r = server.client.post(f"/v1/computers/short/ports/{port}/view-link", json=bad, headers=h)
        assert r.status_code == 422, bad
    r = server.client.post(
        f"/v1/computers/short/ports/{port}/view-link", json={"expires_in": 7 * 86400}, headers=h
    )
    assert r.status_code == 200


def test_a_view_link_is_made_only_for_a_private_port_of_the_org(
    server: Server, guest: tuple[int, Seen]
) -> None:
    port, _ = guest
    publish(server, server.key, "mine", port, public=False)
    h = server.headers()
    r = server.client.post(f"/v1/computers/mine/ports/{port + 1}/view-link", headers=h)
    assert (r.status_code, r.json()["error"]["code"]) == (404, "port_not_found")
    server.client.post(
        "/v1/computers/mine/ports", json={"port": port + 2, "public": True}, headers=h
    )
    r = server.client.post(f"/v1/computers/mine/ports/{port + 2}/view-link", headers=h)
    assert (r.status_code, r.json()["error"]["code"]) == (409, "port_public")
    acme = make_org(server, "acme")
    r = server.client.post(
        f"/v1/computers/mine/ports/{port}/view-link", headers=server.headers(acme)
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == "computer_not_found"


def test_a_view_link_opens_no_other_port_computer_or_org(
    server: Server, guest: tuple[int, Seen]
) -> None:
    port, seen = guest
    acme = make_org(server, "acme")
    publish(server, server.key, "one", port, public=False)
    server.client.post(
        "/v1/computers/one/ports",
        json={"port": port + 1, "public": False},
        headers=server.headers(),
    )
    publish(server, server.key, "two", port, public=False)
    publish(server, acme, "one", port, public=False)
    _, path = host_and_path(view_link(server, "one", port))
    for host in (
        f"{port + 1}-one.localhost:7070",  # another port of the same computer
        f"{port}-two.localhost:7070",  # another computer of the org
        f"{port}-one.acme.localhost:7070",  # another org's computer of the same name
    ):
        r = get(server, host, path)
        assert shape(r) == keyless(server, host), host
        assert "set-cookie" not in r.headers
    # acme's own link opens acme's computer, not the default org's
    _, acme_path = host_and_path(view_link(server, "one", port, key=acme))
    assert shape(get(server, f"{port}-one.localhost:7070", acme_path)) == keyless(
        server, f"{port}-one.localhost:7070"
    )
    trade(server, f"{port}-one.acme.localhost:7070", acme_path)
    assert seen.requests == []


def test_a_changed_or_expired_view_link_is_no_credential(
    server: Server, guest: tuple[int, Seen]
) -> None:
    port, _ = guest
    publish(server, server.key, "tamper", port, public=False)
    host, path = host_and_path(view_link(server, "tamper", port))
    token = path.split("sanbox_view_token=")[1]
    key_id, expires, mac = token.split(".")
    flipped = mac[:-1] + ("0" if mac[-1] != "0" else "1")
    row = server.client.get("/v1/computers/tamper", headers=server.headers()).json()
    publication = next(p["publication"] for p in row["ports"] if p["port"] == port)
    signer = view_link_signer(server.client.app.state.settings.layout.secret_key)  # type: ignore[attr-defined]
    target = LinkTarget(row["id"], server_org_id(server), port, publication)
    expired, _ = signer.mint(target, key_id, 60, now=time.time() - 120)
    fresh, _ = signer.mint(target, key_id, 60)
    assert get(server, host, f"/?sanbox_view_token={fresh}").status_code == 200
    server.client.cookies.clear()
    expected = keyless(server, host)
    for bad in (
        f"{key_id}.{expires}.{flipped}",
        f"{key_id}.{int(expires) + 86400}.{mac}",
        expired,
        "x",
        "%C3%A9.%C3%A9.%C3%A9",
    ):
        r = get(server, host, f"/?sanbox_view_token={bad}")
        assert shape(r) == expected, bad
        assert "set-cookie" not in r.headers


def server_org_id(server: Server) -> str:
    orgs = server.client.get("/v1/orgs", headers=server.headers()).json()["orgs"]
    return str(next(o["id"] for o in orgs if o["name"] == "default"))


def test_a_view_link_stops_when_its_publication_computer_or_key_goes(
    server: Server, guest: tuple[int, Seen]
) -> None:
    port, _ = guest
    h = server.headers()
    publish(server, server.key, "gone", port, public=False)
    host, path = host_and_path(view_link(server, "gone", port))
    trade(server, host, path)
    # unpublished: the keyless answer; published again: still (a new publication)
    assert server.client.delete(f"/v1/computers/gone/ports/{port}", headers=h).status_code == 204
    assert shape(get(server, host, path)) == keyless(server, host)
    server.client.post("/v1/computers/gone/ports", json={"port": port, "public": False}, headers=h)
    assert shape(get(server, host, path)) == keyless(server, host)
    # published again while published (a changed flag): the same publication, its link works
    host, path = host_and_path(view_link(server, "gone", port))
    server.client.post("/v1/computers/gone/ports", json={"port": port, "public": False}, headers=h)
    trade(server, host, path)
    # the computer deleted and another made with its name and port: the keyless answer
    assert server.client.delete("/v1/computers/gone", headers=h).status_code in (200, 202, 204)
    publish(server, server.key, "gone", port, public=False)
    assert shape(get(server, host, path)) == keyless(server, host)
    # the key that made it revoked: the keyless answer
    r = server.client.post("/v1/keys", json={"org": "default", "name": "lender"}, headers=h)
    lender = r.json()
    host, path = host_and_path(view_link(server, "gone", port, key=lender["key"]))
    trade(server, host, path)
    assert server.client.delete(f"/v1/keys/{lender['id']}", headers=h).status_code in (200, 204)
    assert shape(get(server, host, path)) == keyless(server, host)


def test_the_sdk_and_the_cli_make_view_links(
    live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Sanbox(live_server.url, live_server.key) as client:
        c = client.computers.create(name="linked")
        c.publish(8080)
        link = c.view_link(8080, expires_in=120)
        assert "sanbox_view_token=" in link.url and link.expires_at
        with pytest.raises(SanboxError) as exc:
            c.view_link(8080, expires_in=1)
        assert exc.value.status == 422
    monkeypatch.setenv("SANBOX_URL", live_server.url)
    monkeypatch.setenv("SANBOX_API_KEY", live_server.key)
    runner = CliRunner()
    r = runner.invoke(app, ["port", "view-link", "linked", "8080", "--expires-in", "600"])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("http://8080-linked.localhost:") and live_server.key not in r.output
    r = runner.invoke(app, ["port", "view-link", "linked", "8081"])
    assert r.exit_code == 1 and "port_not_found" in r.output and "Traceback" not in r.output
    assert runner.invoke(app, ["rm", "linked"]).exit_code == 0


def test_a_stream_opened_by_a_view_link_ends_with_its_cookie(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event stream or a long download opened with a view link's cookie ends when the cookie
    does (the link's own end), though the key that made the link still stands: it was checked
    against the key alone, and went on as long as the key did."""
    import types

    from sanbox.api import standing
    from sanbox.api.ports import access

    from .test_published_access import guest_stream, in_background

    monkeypatch.setattr(standing, "RECHECK", 0.1)
    later = [0.0]  # seconds the cookie's clock is moved on
    clock = types.SimpleNamespace(time=lambda: time.time() + later[0])
    monkeypatch.setattr(access, "time", clock)
    with guest_stream(0) as (port, reached):
        publish(server, server.key, "viewed", port, public=False)
        host, path = host_and_path(view_link(server, "viewed", port, expires_in=60))
        _, cookie = trade(server, host, path)
        headers = {"host": host, "cookie": cookie.split(";")[0], "origin": f"http://{host}"}
        ended, _ = in_background(lambda: server.client.get("/events", headers=headers))
        assert reached.wait(10)
        assert not ended.wait(0.5), "the stream should still be going"
        later[0] = 120.0  # past the link's 60 s
        assert ended.wait(10), "the stream outlived its view link's cookie"
