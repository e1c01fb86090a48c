"""A console login link spent in a browser logged in to another org asks first, naming both orgs
(a link someone else made would otherwise move the browser into their org unawares); in a
browser logged in to the same org, or to none, it logs in at once, and only once."""

from __future__ import annotations

import httpx
import pytest

from .conftest import LiveServer

pytestmark = pytest.mark.component


def _link(live: LiveServer, key: str) -> str:
    r = httpx.post(f"{live.url}/v1/console/links", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 201, r.text
    return str(r.json()["url"]).split("#t=", 1)[1]


def test_a_link_into_another_org_asks_before_it_switches(live_server: LiveServer) -> None:
    live = live_server
    admin = {"Authorization": f"Bearer {live.key}"}
    httpx.post(f"{live.url}/v1/orgs", json={"name": "other"}, headers=admin).raise_for_status()
    made = httpx.post(f"{live.url}/v1/keys", json={"org": "other"}, headers=admin)
    made.raise_for_status()
    other = made.json()["key"]
    origin = {"origin": live.url}
    with httpx.Client(base_url=live.url, headers=origin) as browser:
        assert browser.post("/console/login", data={"key": live.key}).status_code == 303
        token = _link(live, other)
        asked = browser.post("/console/link", data={"t": token})
        assert asked.status_code == 200, asked.text
        assert "Switch to org other?" in asked.text and "org <strong>default</strong>" in asked.text
        assert "default" in browser.get("/console/computers").text  # still logged in there
        switched = browser.post("/console/link", data={"t": token, "switch": "yes"})
        assert switched.status_code == 303 and switched.headers["location"] == "/console/computers"
        assert (
            browser.post("/console/link", data={"t": token, "switch": "yes"})
            .headers["location"]
            .endswith("why=link")
        )  # spent
        same = _link(live, other)  # a link of the org it is in now: no question
        assert browser.post("/console/link", data={"t": same}).status_code == 303
    with httpx.Client(base_url=live.url, headers=origin) as fresh:  # logged in to none
        assert fresh.post("/console/link", data={"t": _link(live, other)}).status_code == 303
