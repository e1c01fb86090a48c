"""A console login link asks before it logs in, naming the org and the key, unless the browser
is logged in to the link's org already (a link someone else made would otherwise take the
browser into their org unawares: what its user typed next, a secret's value, went there). In a
browser logged in to another org it asks to switch, naming both orgs. Only the confirmed answer
spends the link, and only once."""

from __future__ import annotations

import httpx
import pytest

from .conftest import LiveServer

pytestmark = pytest.mark.component


def _link(live: LiveServer, key: str) -> str:
    r = httpx.post(f"{live.url}/v1/console/links", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 201, r.text
    return str(r.json()["url"]).split("#t=", 1)[1]


def _other_key(live: LiveServer) -> str:
    """A key of a second org, `other`."""
    admin = {"Authorization": f"Bearer {live.key}"}
    httpx.post(f"{live.url}/v1/orgs", json={"name": "other"}, headers=admin).raise_for_status()
    made = httpx.post(f"{live.url}/v1/keys", json={"org": "other"}, headers=admin)
    made.raise_for_status()
    return str(made.json()["key"])


def test_a_link_into_another_org_asks_before_it_switches(live_server: LiveServer) -> None:
    live = live_server
    other = _other_key(live)
    with httpx.Client(base_url=live.url, headers={"origin": live.url}) as browser:
        assert browser.post("/console/login", data={"key": live.key}).status_code == 303
        token = _link(live, other)
        asked = browser.post("/console/link", data={"t": token})
        assert asked.status_code == 200, asked.text
        assert "Switch to org other?" in asked.text and "org <strong>default</strong>" in asked.text
        assert f"<code>{other[:12]}" in asked.text and 'id="link-confirm"' in asked.text
        assert "default" in browser.get("/console/computers").text  # still logged in there
        switched = browser.post("/console/link", data={"t": token, "confirm": "yes"})
        assert switched.status_code == 303 and switched.headers["location"] == "/console/computers"
        assert (
            browser.post("/console/link", data={"t": token, "confirm": "yes"})
            .headers["location"]
            .endswith("why=link")
        )  # spent
        same = _link(live, other)  # a link of the org it is in now: no question
        assert browser.post("/console/link", data={"t": same}).status_code == 303


def test_a_link_in_a_logged_out_browser_names_the_org_before_it_logs_in(
    live_server: LiveServer,
) -> None:
    live = live_server
    other = _other_key(live)
    with httpx.Client(base_url=live.url, headers={"origin": live.url}) as fresh:
        token = _link(live, other)
        asked = fresh.post("/console/link", data={"t": token})
        assert asked.status_code == 200, asked.text  # it logged in at once, into org other
        assert "Log in to org other?" in asked.text and "Switch" not in asked.text
        assert f"<code>{other[:12]}" in asked.text and 'id="link-confirm"' in asked.text
        assert "sanbox_console" not in fresh.cookies
        out = fresh.get("/console/computers", headers={"accept": "text/html"})
        assert out.headers["location"] == "/console/login?why=required"  # asking logs no one in
        confirmed = fresh.post("/console/link", data={"t": token, "confirm": "yes"})
        assert confirmed.status_code == 303, confirmed.text  # asking spent nothing
        assert ">other</b>" in fresh.get("/console/computers").text
        spent = fresh.post("/console/link", data={"t": token, "confirm": "yes"})
        assert spent.headers["location"] == "/console/login?why=link"
