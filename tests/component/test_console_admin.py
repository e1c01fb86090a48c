"""The console's admin form makes keys as the API does: an expiry it is given is checked, never
dropped (0 hours made a key that never expired)."""

from __future__ import annotations

import re

import httpx
import pytest

from .conftest import LiveServer

pytestmark = pytest.mark.component


def _signed_in(live: LiveServer, browser: httpx.Client) -> dict[str, str]:
    assert browser.post("/console/login", data={"key": live.key}).status_code == 303
    page = browser.get("/console/admin")
    assert page.status_code == 200, page.text
    found = re.search(r'<meta name="csrf-token" content="([^"]+)">', page.text)
    assert found
    return {"x-csrf-token": found.group(1)}


@pytest.mark.parametrize("hours", ["0", "-1"])
def test_a_key_made_to_expire_in_no_time_is_refused(live_server: LiveServer, hours: str) -> None:
    live = live_server
    with httpx.Client(base_url=live.url, headers={"origin": live.url}) as browser:
        csrf = _signed_in(live, browser)
        before = browser.get("/console/admin").text.count("Revoke")
        made = browser.post(
            "/console/admin/keys", data={"name": "x", "expires_hours": hours}, headers=csrf
        )
        assert made.status_code == 422, made.text
        assert "expires_in" in made.text
        assert browser.get("/console/admin").text.count("Revoke") == before  # nothing made
        made = browser.post(
            "/console/admin/keys", data={"name": "y", "expires_hours": "2"}, headers=csrf
        )
        assert made.status_code == 200, made.text
