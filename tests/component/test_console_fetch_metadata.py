"""Another site's page cannot spend a console session's key rate. A published port's page is a
sibling subdomain, same-site, so the SameSite=Strict cookie rides on its requests: every read it
made (`fetch(console, {mode: "no-cors", credentials: "include"})`) and every write it tried
(refused for its CSRF token only after the session was read) took a request from the key's
rate, until the key's own CLI and agents got 429. Such requests are refused before the session
is read now; the console's own requests, a link followed from elsewhere and clients that send no
Fetch Metadata go on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from sanbox.api import ServerSettings, create_app
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime

from .conftest import fake_image

pytestmark = pytest.mark.component

BURST = 5  # the key's requests at once; its clock stands still, so none come back
SIBLING = "http://8080-web1-default.testserver"  # a published port's page
FROM_SIBLING = {
    "sec-fetch-site": "same-site",
    "sec-fetch-mode": "no-cors",
    "sec-fetch-dest": "empty",
}
IN_A_FRAME = {
    "sec-fetch-site": "cross-site",
    "sec-fetch-mode": "navigate",
    "sec-fetch-dest": "iframe",
}
TRIES = 3 * BURST


@pytest.fixture
def console(short_tmp: Path) -> Iterator[TestClient]:
    """A console logged in (the login took one request of the key's `BURST`)."""
    dd = DataDir(short_tmp / "data")
    dd.ensure()
    fake_image(dd)
    settings = ServerSettings(
        data_dir=dd.root, client_config=None, watch_interval=0.2, key_rate=1.0, key_burst=BURST
    )
    now = 1_900_000_000.0
    app = create_app(settings, HostRuntime(dd, LocalDriver(), networking=False), clock=lambda: now)
    with TestClient(app) as client:
        key = client.app.state.first_key  # type: ignore[attr-defined]
        origin = {"origin": "http://testserver"}
        login = client.post(
            "/console/login", data={"key": key}, headers=origin, follow_redirects=False
        )
        assert login.status_code == 303, login.text
        yield client


def _code(r: Any) -> str:
    return str(r.json()["error"]["code"])


def _the_rest_of_the_rate_is_the_keys(client: TestClient, left: int) -> None:
    """The console's own requests get the `left` requests the key still has, and no more."""
    own = [
        {"sec-fetch-site": "same-origin", "hx-request": "true"},  # htmx
        {  # a link to the console followed from another site
            "sec-fetch-site": "cross-site",
            "sec-fetch-mode": "navigate",
            "sec-fetch-dest": "document",
            "accept": "text/html",
        },
        {"sec-fetch-site": "none", "sec-fetch-mode": "navigate", "sec-fetch-dest": "document"},
        {},  # an older browser, a tool
    ]
    for headers in (own * left)[:left]:
        r = client.get("/console/computers", headers=headers)
        assert r.status_code == 200, (headers, r.status_code, r.text[:200])
    spent = client.get("/console/computers", headers={"sec-fetch-site": "same-origin"})
    assert spent.status_code == 429 and _code(spent) == "rate_limited"


def test_another_sites_reads_are_refused_before_the_session_is_read(console: TestClient) -> None:
    for _ in range(TRIES):
        for path in (
            "/console/computers",
            "/console/computers/stream",
            "/console/secrets",
            "/console/computers/x/files/download?path=/etc/hostname",
        ):
            for headers in (FROM_SIBLING, IN_A_FRAME):
                r = console.get(path, headers=headers)
                assert r.status_code == 403 and _code(r) == "csrf_failed", (path, r.text[:200])
                assert "open the console from its own page" in r.json()["error"]["message"]
    _the_rest_of_the_rate_is_the_keys(console, BURST - 1)


def test_another_sites_writes_and_sockets_are_refused_before_the_session_is_read(
    console: TestClient,
) -> None:
    for _ in range(TRIES):
        r = console.post(
            "/console/secrets",
            data={"name": "x", "value": "v" * 12, "hosts": "api.example.com"},
            headers={"origin": SIBLING, **FROM_SIBLING, "sec-fetch-mode": "cors"},
        )
        assert r.status_code == 403 and _code(r) == "csrf_failed", r.text
        for path in ("terminal", "screen/watch"):
            url = f"/console/computers/x/{path}"
            with (
                pytest.raises(WebSocketDisconnect),  # closed before it is accepted
                console.websocket_connect(url, headers={"origin": SIBLING}) as ws,
            ):
                ws.receive_json()
    _the_rest_of_the_rate_is_the_keys(console, BURST - 1)
