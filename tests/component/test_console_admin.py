"""The console's admin pages: its form makes keys as the API does (an expiry it is given is
checked, never dropped: 0 hours made a key that never expired), and its audit filters look
through the whole log, not the newest page of it."""

from __future__ import annotations

import re

import httpx
import pytest

from sanbox.console.admin import AUDIT_SHOWN
from sanbox.control.audit import AuditEntry, AuditLog

from .conftest import LiveServer, Server

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


def test_the_audit_filters_find_records_older_than_the_newest_shown(server: Server) -> None:
    """The filters ran over the newest `AUDIT_SHOWN` records only: an older match never showed.
    They are the query's now, the bound counting matches."""
    audit: AuditLog = server.client.app.state.audit  # type: ignore[attr-defined]
    old = AuditEntry("POST /v1/Old-Needle/{ref}", 409, code="needle_code", key_prefix="sbk_needle0")
    audit.record(old)
    for i in range(AUDIT_SHOWN + 10):  # newer records, none of them a match
        audit.record(AuditEntry(f"POST /v1/hay/{i}", 200, key_prefix="sbk_hay0000"))
    origin = {"origin": "http://testserver"}
    login = server.client.post("/console/login", data={"key": server.key}, headers=origin)
    assert login.status_code == 200, login.text  # the computers page it leads to
    for query in ({"action": "old-needle"}, {"key": "sbk_needle0"}, {"code": "needle_code"}):
        page = server.client.get("/console/admin", params=query)
        assert page.status_code == 200, page.text
        assert "POST /v1/Old-Needle/{ref}" in page.text, query
        assert "/v1/hay/" not in page.text, query
    hay = server.client.get("/console/admin", params={"action": "/v1/hay/"}).text
    assert hay.count("POST /v1/hay/") == AUDIT_SHOWN  # the newest matches, still bounded
    assert f"POST /v1/hay/{AUDIT_SHOWN + 9}<" in hay and "POST /v1/hay/9<" not in hay
    percent = server.client.get("/console/admin", params={"action": "%"}).text
    assert "/v1/hay/" not in percent  # a pattern's characters are the action's, not SQL's
