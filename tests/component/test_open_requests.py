"""Open requests are bounded per API key and per org (`api/open_requests.py`): WebSockets held
open (exec streams here) take the places; past a key's bound its next request is refused 429
`too_many_open_requests` before it does anything, past its org's the org's other keys' too, while
another org is untouched; a refused request holds nothing, and a place comes back when its
request ends."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from .conftest import local_app

pytestmark = pytest.mark.component


def _h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def client(short_tmp: Path) -> Iterator[TestClient]:
    app, _ = local_app(short_tmp, open_requests_per_key=2, open_requests_per_org=3)
    with TestClient(app) as c:
        yield c


def test_open_requests_are_bounded_per_key_and_per_org(client: TestClient) -> None:
    admin = client.app.state.first_key  # type: ignore[attr-defined]
    made = client.post("/v1/computers", json={"name": "held"}, headers=_h(admin))
    assert made.status_code == 201, made.text
    a, b = (
        client.post("/v1/keys", json={"name": n}, headers=_h(admin)).json()["key"]
        for n in ("a", "b")
    )
    assert client.post("/v1/orgs", json={"name": "other"}, headers=_h(admin)).status_code == 201
    other = client.post("/v1/keys", json={"org": "other", "name": "o"}, headers=_h(admin))
    stream = "/v1/computers/held/exec/stream"
    with contextlib.ExitStack() as open_:
        for _ in range(2):  # key a: its two places
            open_.enter_context(client.websocket_connect(stream, headers=_h(a)))
        refused = client.get("/v1/computers", headers=_h(a))
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "too_many_open_requests"
        assert "close some" in refused.json()["error"]["message"]
        assert client.get("/v1/computers", headers=_h(b)).status_code == 200  # the org's third
        open_.enter_context(client.websocket_connect(stream, headers=_h(b)))  # ... held
        by_org = client.get("/v1/computers", headers=_h(b))
        assert by_org.status_code == 429 and "org's keys" in by_org.json()["error"]["message"]
        mine = client.get("/v1/computers", headers=_h(other.json()["key"]))
        assert mine.status_code == 200  # another org is untouched
    for key in (a, b):  # every place came back with its request
        for _ in range(3):
            assert client.get("/v1/computers", headers=_h(key)).status_code == 200
    assert client.delete("/v1/computers/held", headers=_h(admin)).status_code == 200
