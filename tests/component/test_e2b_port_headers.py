"""A request to a sandbox's private port carries E2B's traffic token, the caller's credential
for that port: the port is sent the request without it, as it is sent no Sanbox key."""

from __future__ import annotations

import pytest

from .conftest import E2bStand
from .test_devtools_discovery import devtools_guest

pytestmark = pytest.mark.component


def test_the_traffic_token_is_not_sent_to_the_port(e2b: E2bStand) -> None:
    made = e2b.client.post(
        "/e2b/sandboxes",
        headers=e2b.api,
        json={"templateID": "base", "network": {"allowPublicTraffic": False}},
    )
    assert made.status_code == 201, made.text
    sandbox, token = made.json()["sandboxID"], made.json()["trafficAccessToken"]
    seen: list[dict[str, str]] = []
    with devtools_guest({"/app": (200, {}, b"hello")}, seen) as port:
        headers = {"host": f"{port}-{sandbox}.localhost", "e2b-traffic-access-token": token}
        r = e2b.client.get("/app", headers={**headers, "x-app": "kept"})
        assert (r.status_code, r.text) == (200, "hello")
        r = e2b.client.get("/app", headers={"host": headers["host"]})  # the token is needed
        assert r.status_code != 200
    assert len(seen) == 1 and seen[0].get("x-app") == "kept"
    assert "e2b-traffic-access-token" not in seen[0]
    assert token not in str(seen[0])
